package redleaseotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlease/redlease"
	redleaseotel "github.com/redlease/redlease/otel"
)

func ExampleNewObserver() {
	mr, err := miniredis.Run() // in production: your Redis
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// In production: your MeterProvider (or none: the global one is used).
	reader := sdkmetric.NewManualReader()
	obs, err := redleaseotel.NewObserver(
		redleaseotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		log.Fatal(err)
	}
	locks := redlease.New(rdb, redlease.WithObserver(obs))
	defer locks.Close(ctx)

	lease, err := locks.TryAcquire(ctx, "tenant:42:billing")
	if err != nil {
		log.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Println(m.Name)
	}
	// Unordered output:
	// redlease.acquire.duration
	// redlease.hold.duration
	// redlease.releases
}
