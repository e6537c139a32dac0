package tests

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	// The SQL drivers the fencing tests run on: servertest.Postgres opens
	// its pools with pgx's, and openSQLite with sqlite's.
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// The SQL guards' tests on real databases, SQLite and PostgreSQL. They live
// in this module, not in package fencing, because they need SQL drivers,
// which the core module must not require; the guards' driver-free tests
// (bad input, Cond) stay in fencing/sql_test.go.

// openSQLite returns a pool on a new SQLite file whose transactions begin
// IMMEDIATE (taking the write lock) and wait for it instead of failing.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "test.db") +
		"?_txlock=immediate&_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// forEachDialect runs f on a fresh SQLite database and on a fresh PostgreSQL
// database, each with the SQL that differs between them.
func forEachDialect(t *testing.T, f func(t *testing.T, d dialectDB)) {
	t.Run("sqlite", func(t *testing.T) {
		f(t, dialectDB{SQLDialect: fencing.DialectSQLite, db: openSQLite(t), serial: "INTEGER PRIMARY KEY AUTOINCREMENT"})
	})
	t.Run("postgres", func(t *testing.T) {
		f(t, dialectDB{SQLDialect: fencing.DialectPostgres, db: servertest.Postgres(t), serial: "BIGSERIAL PRIMARY KEY"})
	})
}

type dialectDB struct {
	fencing.SQLDialect
	db     *sql.DB
	serial string // an auto-incrementing primary key column type
}

// q rewrites a statement written with $n placeholders (n < 10) for the dialect.
func (d dialectDB) q(s string) string {
	if d.SQLDialect == fencing.DialectSQLite {
		return strings.NewReplacer("$", "?").Replace(s)
	}
	return s
}

// arg returns the dialect's placeholder for the n-th argument (from 1), as
// RowGuard.Cond writes it: $n in PostgreSQL, ?n in SQLite.
func (d dialectDB) arg(n int) string {
	if d.SQLDialect == fencing.DialectSQLite {
		return "?" + strconv.Itoa(n)
	}
	return "$" + strconv.Itoa(n)
}

func (d dialectDB) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	_, err := d.db.ExecContext(context.Background(), d.q(query), args...)
	require.NoError(t, err, query)
}

// newGuard creates the guard's table and returns the guard.
func (d dialectDB) newGuard(t testing.TB) *fencing.SQLGuard {
	t.Helper()
	g, err := fencing.NewSQLGuard(d.SQLDialect, "fence_guard")
	require.NoError(t, err)
	require.NoError(t, g.CreateTable(t.Context(), d.db))
	return g
}

// fencedTx runs write in a transaction behind g.Check, and commits only if
// both succeed.
func fencedTx(ctx context.Context, db *sql.DB, g *fencing.SQLGuard, resource string, fence int64, owner string,
	write func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := g.Check(ctx, tx, resource, fence, owner); err != nil {
		return err
	}
	if err := write(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// The seeds' story: A draws fence 33 and freezes past its TTL; B takes over
// with 34 and pays; A wakes up and pays too. The guard refuses A, and the
// invoice is charged exactly once.
func TestSQLGuardDoublePaymentStory(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d dialectDB) {
		ctx := t.Context()
		g := d.newGuard(t)
		d.exec(t, "CREATE TABLE charges (id "+d.serial+", invoice TEXT NOT NULL, fence BIGINT NOT NULL)")
		pay := func(l *redlease.Lease) error {
			return fencedTx(ctx, d.db, g, l.Resource(), l.Fence(), l.Owner(), func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, d.q("INSERT INTO charges (invoice, fence) VALUES ($1, $2)"), "42", l.Fence())
				return err
			})
		}

		a, b := staleAndCurrent(t)
		require.NoError(t, pay(b))

		err := pay(a) // A wakes up
		require.ErrorIs(t, err, fencing.ErrStaleFence)
		var stale *fencing.StaleFenceError
		require.ErrorAs(t, err, &stale)
		require.Equal(t, fencing.StaleFenceError{Resource: "invoice:42", Fence: 33, Owner: a.Owner(),
			Newest: 34, NewestOwner: b.Owner()}, *stale)

		var n, fence int64
		require.NoError(t, d.db.QueryRowContext(ctx, "SELECT COUNT(*), MAX(fence) FROM charges").Scan(&n, &fence))
		require.Equal(t, int64(1), n, "charged exactly once")
		require.Equal(t, int64(34), fence, "by B")
		require.NoError(t, b.Release(ctx))
		require.ErrorIs(t, a.Release(ctx), redlease.ErrLeaseLost)
	})
}

// The fencing rule, step by step on one resource: equal fences pass only for
// the owner recorded with them, and a refused check changes nothing.
func TestSQLGuardEqualFenceRule(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d dialectDB) {
		g := d.newGuard(t)
		steps := []struct {
			fence         int64
			owner         string
			newest        int64 // 0: accepted
			newestOwner   string
			afterFence    int64
			afterOwnerStr string
		}{
			{fence: 5, owner: "a", afterFence: 5, afterOwnerStr: "a"},
			{fence: 5, owner: "a", afterFence: 5, afterOwnerStr: "a"}, // the same holder writes again
			{fence: 5, owner: "b", newest: 5, newestOwner: "a", afterFence: 5, afterOwnerStr: "a"},
			{fence: 4, owner: "a", newest: 5, newestOwner: "a", afterFence: 5, afterOwnerStr: "a"},
			{fence: 6, owner: "b", afterFence: 6, afterOwnerStr: "b"},
			{fence: 6, owner: "a", newest: 6, newestOwner: "b", afterFence: 6, afterOwnerStr: "b"},
			{fence: 6, owner: "b", afterFence: 6, afterOwnerStr: "b"},
			{fence: 1 << 62, owner: "c", afterFence: 1 << 62, afterOwnerStr: "c"},
		}
		for i, s := range steps {
			err := fencedTx(t.Context(), d.db, g, "r", s.fence, s.owner, func(*sql.Tx) error { return nil })
			if s.newest == 0 {
				require.NoError(t, err, "step %d", i)
			} else {
				var stale *fencing.StaleFenceError
				require.ErrorAs(t, err, &stale, "step %d", i)
				require.Equal(t, fencing.StaleFenceError{Resource: "r", Fence: s.fence, Owner: s.owner,
					Newest: s.newest, NewestOwner: s.newestOwner}, *stale, "step %d", i)
			}
			var f int64
			var o string
			require.NoError(t, d.db.QueryRow(d.q("SELECT fence, owner FROM fence_guard WHERE resource = $1"), "r").Scan(&f, &o))
			require.Equal(t, s.afterFence, f, "step %d", i)
			require.Equal(t, s.afterOwnerStr, o, "step %d", i)
		}
		// Another resource has a row of its own.
		require.NoError(t, fencedTx(t.Context(), d.db, g, "other", 1, "z", func(*sql.Tx) error { return nil }))
	})
}

// Many goroutines run fenced transactions with random fences and owners at
// once; each accepted transaction appends to a log. The log, in insertion
// (= commit) order, never goes back, and every refusal was by the rule.
func TestSQLGuardConcurrentFencesNeverGoBack(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d dialectDB) {
		ctx := t.Context()
		g := d.newGuard(t)
		d.exec(t, "CREATE TABLE accepted (id "+d.serial+", fence BIGINT NOT NULL, owner TEXT NOT NULL)")
		const workers, perWorker = 8, 20
		refused := raceFences(t, workers, perWorker, 40, func(fence int64, owner string) error {
			return fencedTx(ctx, d.db, g, "r", fence, owner, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, d.q("INSERT INTO accepted (fence, owner) VALUES ($1, $2)"), fence, owner)
				return err
			})
		})

		rows, err := d.db.QueryContext(ctx, "SELECT fence, owner FROM accepted ORDER BY id")
		require.NoError(t, err)
		defer rows.Close()
		var accepted []fenceToken
		for rows.Next() {
			var a fenceToken
			require.NoError(t, rows.Scan(&a.fence, &a.owner))
			accepted = append(accepted, a)
		}
		require.NoError(t, rows.Err())
		requireNeverBack(t, accepted, refused, workers*perWorker)
	})
}

// The per-row pattern on the same story: the fenced UPDATE itself is the
// check, and a write that changes nothing is explained: stale fence, row in
// another state, or no such row.
func TestRowGuardTellsStaleFromOtherState(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d dialectDB) {
		ctx := t.Context()
		d.exec(t, `CREATE TABLE invoices (id BIGINT PRIMARY KEY, state TEXT NOT NULL,
			last_fence BIGINT NOT NULL DEFAULT 0, last_owner TEXT NOT NULL DEFAULT '')`)
		d.exec(t, "INSERT INTO invoices (id, state) VALUES (42, 'pending'), (43, 'pending')")
		rows, err := fencing.NewRowGuard(d.SQLDialect, "invoices", "id", "last_fence", "last_owner")
		require.NoError(t, err)
		pay := func(id, fence int64, owner string) error {
			res, err := d.db.ExecContext(ctx, `UPDATE invoices SET state = 'paid', last_fence = `+
				d.arg(2)+`, last_owner = `+d.arg(3)+
				` WHERE id = `+d.arg(1)+` AND state = 'pending' AND `+rows.Cond(2), id, fence, owner)
			if err != nil {
				return err
			}
			return rows.Verify(ctx, d.db, res, id, fence, owner)
		}
		touch := func(id, fence int64, owner string) error { // a write that any state allows
			res, err := d.db.ExecContext(ctx, `UPDATE invoices SET last_fence = `+d.arg(2)+
				`, last_owner = `+d.arg(3)+` WHERE id = `+d.arg(1)+` AND `+rows.Cond(2), id, fence, owner)
			if err != nil {
				return err
			}
			return rows.Verify(ctx, d.db, res, id, fence, owner)
		}

		require.NoError(t, pay(42, 34, "B"))
		err = pay(42, 33, "A") // the stale holder
		var stale *fencing.StaleFenceError
		require.ErrorAs(t, err, &stale)
		require.Equal(t, fencing.StaleFenceError{Resource: "invoices/42", Fence: 33, Owner: "A", Newest: 34, NewestOwner: "B"}, *stale)
		require.NotErrorIs(t, err, fencing.ErrNoRowMatched)

		err = pay(42, 34, "B") // B again: its fence is fine, the invoice is no longer pending
		require.ErrorIs(t, err, fencing.ErrNoRowMatched)
		require.NotErrorIs(t, err, fencing.ErrStaleFence)
		require.ErrorIs(t, pay(42, 35, "C"), fencing.ErrNoRowMatched)
		require.ErrorIs(t, pay(99, 35, "C"), fencing.ErrNoRowMatched, "no such row")

		require.NoError(t, touch(42, 34, "B"), "equal fence, same owner")
		require.ErrorIs(t, touch(42, 34, "X"), fencing.ErrStaleFence, "equal fence, other owner")
		require.NoError(t, pay(43, 1, "A"), "each row has its own fence")

		var state string
		var fence int64
		require.NoError(t, d.db.QueryRow("SELECT state, last_fence FROM invoices WHERE id = 42").Scan(&state, &fence))
		require.Equal(t, "paid", state)
		require.Equal(t, int64(34), fence)

		// The strict pattern, without an owner column: each fence once per row.
		strict, err := fencing.NewRowGuard(d.SQLDialect, "invoices", "id", "last_fence", "")
		require.NoError(t, err)
		bump := func(id, fence int64) error {
			res, err := d.db.ExecContext(ctx, `UPDATE invoices SET last_fence = `+d.arg(2)+
				` WHERE id = `+d.arg(1)+` AND `+strict.Cond(2), id, fence)
			if err != nil {
				return err
			}
			return strict.Verify(ctx, d.db, res, id, fence, "")
		}
		require.NoError(t, bump(42, 35))
		require.ErrorIs(t, bump(42, 35), fencing.ErrStaleFence)
		require.ErrorIs(t, bump(42, 2), fencing.ErrStaleFence)
		require.ErrorIs(t, bump(99, 36), fencing.ErrNoRowMatched)
	})
}

// Reserved words pass the identifier check, so they must work as names: the
// guards quote every name they splice into a statement. Mixed case names
// what it named unquoted (PostgreSQL folds it to lower case).
func TestSQLGuardsTakeReservedWords(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d dialectDB) {
		ctx := t.Context()
		g, err := fencing.NewSQLGuard(d.SQLDialect, "order")
		require.NoError(t, err)
		require.NoError(t, g.CreateTable(ctx, d.db))
		nothing := func(*sql.Tx) error { return nil }
		require.NoError(t, fencedTx(ctx, d.db, g, "r", 5, "a", nothing))
		require.ErrorIs(t, fencedTx(ctx, d.db, g, "r", 4, "b", nothing), fencing.ErrStaleFence)
		require.NoError(t, g.Forget(ctx, d.db, "r"))
		require.NoError(t, fencedTx(ctx, d.db, g, "r", 4, "b", nothing))

		// Double quotes are the caller's own SQL: valid in both dialects.
		d.exec(t, `CREATE TABLE "select" ("user" BIGINT PRIMARY KEY, "end" BIGINT NOT NULL DEFAULT 0,
			"group" TEXT NOT NULL DEFAULT '')`)
		d.exec(t, `INSERT INTO "select" ("user") VALUES (1)`)
		for _, owner := range []string{"group", ""} {
			rows, err := fencing.NewRowGuard(d.SQLDialect, "Select", "USER", "End", owner)
			require.NoError(t, err)
			args := []any{1, int64(0), "o"}
			if owner == "" {
				args = args[:2] // Cond refers to no owner argument
			}
			bump := func(fence int64) error {
				args[1] = fence
				res, err := d.db.ExecContext(ctx, `UPDATE "select" SET "end" = `+d.arg(2)+
					` WHERE "user" = `+d.arg(1)+` AND `+rows.Cond(2), args...)
				if err != nil {
					return err
				}
				return rows.Verify(ctx, d.db, res, 1, fence, "o")
			}
			require.NoError(t, bump(10), "owner column %q", owner)
			require.ErrorIs(t, bump(9), fencing.ErrStaleFence, "owner column %q", owner)
			d.exec(t, `UPDATE "select" SET "end" = 0`)
		}
	})
}

// The bytes the SQL guards refuse in a name before any statement are bytes
// PostgreSQL would refuse itself, with a database error in the middle of the
// caller's transaction; the longest name they take (every guard's, a
// lease's with a permit's suffix) is stored.
func TestSQLGuardResourceNamesMatchWhatPostgresStores(t *testing.T) {
	db := servertest.Postgres(t)
	ctx := t.Context()
	g, err := fencing.NewSQLGuard(fencing.DialectPostgres, "fence_guard")
	require.NoError(t, err)
	require.NoError(t, g.CreateTable(ctx, db))
	insert := func(resource string) error {
		_, err := db.ExecContext(ctx, "INSERT INTO fence_guard (resource, fence, owner) VALUES ($1, 1, 'o')", resource)
		return err
	}
	// Random bytes do not compress: TOAST cannot shrink the index entry.
	longest := make([]byte, fencing.MaxResource)
	for i := range longest {
		longest[i] = 'a' + byte(rand.IntN(26))
	}
	nothing := func(*sql.Tx) error { return nil }
	for _, bad := range []string{"a\x00b", "\xff\xfe"} {
		require.ErrorIs(t, fencedTx(ctx, db, g, bad, 1, "o", nothing), redlease.ErrInvalidArgument)
		require.Error(t, insert(bad), "PostgreSQL refuses it too")
	}
	require.ErrorIs(t, fencedTx(ctx, db, g, string(longest)+"z", 1, "o", nothing), redlease.ErrInvalidArgument,
		"no lease has it")
	require.NoError(t, fencedTx(ctx, db, g, string(longest), 1, "o", nothing))
}

// Forget deletes a resource's row: afterwards any fence is admitted again,
// and only that resource's row is gone.
func TestSQLGuardForget(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d dialectDB) {
		ctx := t.Context()
		g := d.newGuard(t)
		nothing := func(*sql.Tx) error { return nil }
		require.NoError(t, fencedTx(ctx, d.db, g, "gone", 5, "a", nothing))
		require.NoError(t, fencedTx(ctx, d.db, g, "kept", 5, "a", nothing))
		require.ErrorIs(t, fencedTx(ctx, d.db, g, "gone", 4, "b", nothing), fencing.ErrStaleFence)
		require.NoError(t, g.Forget(ctx, d.db, "gone"))
		require.NoError(t, fencedTx(ctx, d.db, g, "gone", 4, "b", nothing), "a forgotten resource admits any fence")
		require.ErrorIs(t, fencedTx(ctx, d.db, g, "kept", 4, "b", nothing), fencing.ErrStaleFence, "the other row stays")
		require.ErrorIs(t, g.Forget(ctx, nil, "x"), redlease.ErrInvalidArgument)
		require.ErrorIs(t, g.Forget(ctx, d.db, ""), redlease.ErrInvalidArgument)
	})
}

// SQLGuard reports a refused check to its observers as a stale fence, and
// an accepted one not at all. (The same for the other guards is
// TestGuardsReportStaleFences in package fencing.)
func TestSQLGuardReportsStaleFences(t *testing.T) {
	ctx := t.Context()
	rec := &fenceEvents{}
	db := openSQLite(t)
	g, err := fencing.NewSQLGuard(fencing.DialectSQLite, "fences", fencing.WithObserver(rec))
	require.NoError(t, err)
	require.NoError(t, g.CreateTable(ctx, db))
	nothing := func(*sql.Tx) error { return nil }
	require.NoError(t, fencedTx(ctx, db, g, "r", 2, "o", nothing))
	require.Empty(t, rec.take())
	require.ErrorIs(t, fencedTx(ctx, db, g, "r", 1, "o", nothing), fencing.ErrStaleFence)
	require.Equal(t, []string{"stale_fence:stale"}, rec.take())
}
