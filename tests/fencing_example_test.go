package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
)

// The examples of the SQL guards, fencing.SQLGuard and fencing.RowGuard.
// They are here, not in package fencing, because they need an SQL driver
// (SQLite, in memory), which the core module must not require; the
// guards' documentation points here.

// fencingExampleRedis starts an embedded Redis for an example.
func fencingExampleRedis() (redis.UniversalClient, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

// fencingExampleSQLite opens an in-memory SQLite database (one connection,
// so that every statement sees the same database).
func fencingExampleSQLite() *sql.DB {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// fencingExampleAcquire takes a lease for an example, or stops it.
func fencingExampleAcquire(ctx context.Context, locks *redlease.Client, resource string) *redlease.Lease {
	l, err := locks.Acquire(ctx, resource)
	fencingExampleCheck(err)
	return l
}

// fencingExampleCheck stops an example on an error it does not expect.
func fencingExampleCheck(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// Check the lease's fence first, in the same transaction as the write it
// protects: the guard's row lock then orders fenced transactions, and a stale
// holder's write is never committed.
func Example_sqlGuard() {
	rdb, stop := fencingExampleRedis()
	defer stop()
	db := fencingExampleSQLite()
	defer db.Close()
	ctx := context.Background()
	locks := redlease.New(rdb)

	guard, err := fencing.NewSQLGuard(fencing.DialectSQLite, "fence_guard")
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE charges (invoice TEXT, fence INTEGER)"); err != nil {
		log.Fatal(err)
	}

	pay := func(lease *redlease.Lease) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Check(ctx, tx, lease.Resource(), lease.Fence(), lease.Owner()); err != nil {
			return err // errors.Is(err, fencing.ErrStaleFence): roll back, write nothing
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO charges VALUES (?, ?)", "42", lease.Fence()); err != nil {
			return err
		}
		return tx.Commit()
	}

	a := fencingExampleAcquire(ctx, locks, "invoice:42")
	fencingExampleCheck(a.Release(ctx)) // stands in for A pausing past its TTL
	b := fencingExampleAcquire(ctx, locks, "invoice:42")
	defer b.Release(ctx)

	fmt.Println("B:", pay(b))
	err = pay(a)
	fmt.Println("A:", err)
	var stale *fencing.StaleFenceError
	if errors.As(err, &stale) {
		fmt.Println("newest accepted:", stale.Newest)
	}
	var charges int
	fencingExampleCheck(db.QueryRowContext(ctx, "SELECT COUNT(*) FROM charges").Scan(&charges))
	fmt.Println("charges:", charges)
	// Output:
	// B: <nil>
	// A: redlease: stale fence 1 for "invoice:42": newest accepted is 2
	// newest accepted: 2
	// charges: 1
}

// The per-row pattern: the row keeps the fence of its last write, and the
// fenced UPDATE is the check. When it changes nothing, Verify says why.
func Example_rowGuard() {
	db := fencingExampleSQLite()
	defer db.Close()
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `CREATE TABLE invoices (id INTEGER PRIMARY KEY, state TEXT NOT NULL,
		last_fence INTEGER NOT NULL DEFAULT 0, last_owner TEXT NOT NULL DEFAULT '');
		INSERT INTO invoices (id, state) VALUES (42, 'pending')`)
	if err != nil {
		log.Fatal(err)
	}
	rows, err := fencing.NewRowGuard(fencing.DialectSQLite, "invoices", "id", "last_fence", "last_owner")
	if err != nil {
		log.Fatal(err)
	}

	pay := func(id, fence int64, owner string) error {
		res, err := db.ExecContext(ctx, `UPDATE invoices SET state = 'paid', last_fence = ?2, last_owner = ?3
			WHERE id = ?1 AND state = 'pending' AND `+rows.Cond(2), id, fence, owner)
		if err != nil {
			return err
		}
		return rows.Verify(ctx, db, res, id, fence, owner)
	}

	fmt.Println("B, fence 34:", pay(42, 34, "owner-B"))
	fmt.Println("A, fence 33:", pay(42, 33, "owner-A"))
	fmt.Println("B again:", pay(42, 34, "owner-B"))
	fmt.Println("no such invoice:", pay(7, 35, "owner-C"))
	// Output:
	// B, fence 34: <nil>
	// A, fence 33: redlease: stale fence 33 for "invoices/42": newest accepted is 34
	// B again: redlease: no row matched: row 42 of invoices is not in the state the update requires
	// no such invoice: redlease: no row matched: invoices has no row 7
}
