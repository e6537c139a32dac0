package fencing

import (
	"log/slog"

	"github.com/redlease/redlease"
)

// Option configures a guard or a store. Not every guard honours every
// option; each constructor's documentation says which apply.
type Option func(*config)

type config struct {
	prefix    string
	observers []redlease.Observer
}

func newConfig(opts []Option) config {
	c := config{prefix: redlease.DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithPrefix sets the prefix of the keys in which the Redis guards and
// RedisStore keep their fence records (default redlease.DefaultPrefix), to
// keep several applications' records apart on one Redis. Guards of one
// resource must agree on it: each prefix is a record of its own. It must not
// hold a '{': the braces that follow it are the record's hash tag.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithObserver adds an observer that sees each write a guard refuses, as a
// redlease.EventStaleFence. The OpenTelemetry observer of the module
// github.com/redlease/redlease/otel counts them.
func WithObserver(o redlease.Observer) Option {
	return func(c *config) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	}
}

// WithLogger logs each refused write to l at Warn, as redlease.WithLogger
// logs lease events.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		return nil
	}
	return WithObserver(redlease.LogObserver(l))
}
