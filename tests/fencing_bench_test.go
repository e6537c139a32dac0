package tests

import (
	"context"
	"database/sql"
	"testing"

	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/servertest"
)

// What SQLGuard.Check adds to a transaction, on SQLite and PostgreSQL. Run
// with
//
//	go test -run '^$' -bench SQLGuard -benchtime 2000x
//
// The benchmarks of the other guards are in package fencing (bench_test.go).

func BenchmarkSQLGuardCheck(b *testing.B) {
	for _, d := range []struct {
		name    string
		dialect fencing.SQLDialect
		open    func(testing.TB) *sql.DB
	}{
		{"sqlite", fencing.DialectSQLite, openSQLite},
		{"postgres", fencing.DialectPostgres, servertest.Postgres},
	} {
		b.Run(d.name, func(b *testing.B) {
			db := d.open(b)
			ctx := context.Background()
			g, err := fencing.NewSQLGuard(d.dialect, "fence_guard")
			if err != nil {
				b.Fatal(err)
			}
			if err := g.CreateTable(ctx, db); err != nil {
				b.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)"); err != nil {
				b.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1, 0)"); err != nil {
				b.Fatal(err)
			}
			for _, fenced := range []bool{false, true} {
				name := "tx with UPDATE"
				if fenced {
					name = "tx with Check and UPDATE"
				}
				b.Run(name, func(b *testing.B) {
					for b.Loop() {
						tx, err := db.BeginTx(ctx, nil)
						if err != nil {
							b.Fatal(err)
						}
						if fenced {
							if err := g.Check(ctx, tx, "r", 1, "o"); err != nil {
								b.Fatal(err)
							}
						}
						if _, err := tx.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
							b.Fatal(err)
						}
						if err := tx.Commit(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
