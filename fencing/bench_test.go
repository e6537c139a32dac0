package fencing

import (
	"context"
	"database/sql"
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

// What a fence check adds to a write. Run with
//
//	go test -run '^$' -bench Guard -benchtime 2000x
//
// Each guarded write is compared with the same write unguarded.

func BenchmarkRedisGuardSet(b *testing.B) {
	rdb := servertest.Redis(b).Client(b)
	ctx := context.Background()
	g := NewRedisGuard(rdb)
	b.Run("plain SET", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Set(ctx, "{k}", "v", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced Set", func(b *testing.B) {
		for b.Loop() {
			if err := g.Set(ctx, "{k}", "v", 0, 1, "o"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSQLGuardCheck(b *testing.B) {
	for _, d := range []struct {
		name    string
		dialect SQLDialect
		open    func(testing.TB) *sql.DB
	}{
		{"sqlite", DialectSQLite, openSQLite},
		{"postgres", DialectPostgres, servertest.Postgres},
	} {
		b.Run(d.name, func(b *testing.B) {
			db := d.open(b)
			ctx := context.Background()
			g, err := NewSQLGuard(d.dialect, "fence_guard")
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
