package fencing

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/shared"
)

// SQLDialect names the SQL a guard writes. The guards use database/sql only
// and work with any driver of the dialect.
//
// MySQL is not supported. Its upsert, INSERT … ON DUPLICATE KEY UPDATE, has
// no WHERE on the update branch, so the fencing rule would be spelled as an
// IF() per column, where each assignment sees the columns assigned before it;
// and it reports 0 rows affected when the update leaves the row as it was,
// which is exactly what the same owner writing twice with its fence does, so
// an accepted write would look refused unless the connection sets
// CLIENT_FOUND_ROWS, a driver setting a guard cannot see. Its plain UPDATE
// has the same rows-affected problem for RowGuard.
type SQLDialect string

// The supported dialects.
const (
	// DialectPostgres is PostgreSQL 9.5 or later: $n placeholders,
	// INSERT … ON CONFLICT … DO UPDATE … WHERE.
	DialectPostgres SQLDialect = "postgres"
	// DialectSQLite is SQLite 3.24 or later: ?NNN placeholders and the same
	// upsert.
	DialectSQLite SQLDialect = "sqlite"
)

// placeholder returns the dialect's placeholder for the n-th argument (from 1).
func (d SQLDialect) placeholder(n int) string {
	if d == DialectPostgres {
		return "$" + strconv.Itoa(n)
	}
	return "?" + strconv.Itoa(n) // SQLite binds ?NNN by number in every driver
}

func (d SQLDialect) valid() bool { return d == DialectPostgres || d == DialectSQLite }

// quote returns name, an identifier that tableRE accepted, quoted for the
// dialect, each part of a schema-qualified name on its own, so that a
// reserved word ("order", "end", "user") names a table or column as any
// other word does. PostgreSQL gets the name in lower case in double quotes,
// which names what the name unquoted did (PostgreSQL folds unquoted
// identifiers to lower case), so quoting changes no name's meaning. SQLite
// gets brackets: its identifiers are case-insensitive quoted or not, and a
// double-quoted name that matches no column would be taken for a string
// literal, turning a misspelt column into a silent comparison with a string
// instead of an error.
func (d SQLDialect) quote(name string) string {
	parts := strings.Split(name, ".")
	for i, part := range parts {
		if d == DialectPostgres {
			parts[i] = `"` + strings.ToLower(part) + `"`
		} else {
			parts[i] = "[" + part + "]"
		}
	}
	return strings.Join(parts, ".")
}

// SQLTx is what the SQL guards run their statements on: the caller's
// transaction, a *sql.Tx, or a *sql.Conn inside BEGIN … COMMIT. A *sql.DB
// also satisfies it, but there each statement commits on its own and the
// check protects nothing; use it only for CreateTable.
type SQLTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ SQLTx = (*sql.Tx)(nil)
	_ SQLTx = (*sql.Conn)(nil)
)

// identRE accepts a plain SQL identifier; tableRE also a schema-qualified one.
// The names they accept are spliced into statements quoted (SQLDialect.quote),
// which they need not escape: no quote or bracket gets through them.
var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
)

// SQLGuard keeps, in a table of its own, the newest fence accepted for each
// resource, and checks a writer's fence inside the writer's transaction.
//
// The table has one row per resource: (resource PRIMARY KEY, fence, owner).
// Check upserts that row with one statement whose update branch runs only
// when the fencing rule admits the write: fence > newest, or fence == newest
// from the same owner. An accepted check leaves the row locked until the
// transaction ends, so fenced transactions on one resource commit one after
// another, in an order in which the accepted fences never go back: a
// transaction with an older fence that waited on the lock sees the newer
// fence once it gets the row, and is refused.
//
// The guarantee holds only for writes made in the same transaction as Check,
// committed after it, on the same database. Call Check first, before the
// writes it protects, and roll back on any error from it:
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	if err := guard.Check(ctx, tx, lease.Resource(), lease.Fence(), lease.Owner()); err != nil {
//		return err // errors.Is(err, fencing.ErrStaleFence): write nothing
//	}
//	if _, err := tx.ExecContext(ctx, "INSERT INTO charges VALUES ($1, $2)", "42", lease.Fence()); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// Under SQLite every write transaction holds the database's write lock,
// which serialises them anyway; begin them with BEGIN IMMEDIATE
// (modernc.org/sqlite: _txlock=immediate) so that they queue on busy_timeout
// instead of failing to upgrade a read lock.
//
// A runnable example, on SQLite, is Example_sqlGuard in the tests module
// (github.com/redlease/redlease/tests, file fencing_example_test.go): it
// needs an SQL driver, which this module does not require.
//
// The zero value is not usable; call NewSQLGuard. An SQLGuard is safe for
// concurrent use.
type SQLGuard struct {
	table     string // as given, for messages
	upsert    string
	newest    string
	forget    string
	ddl       string
	observers []redlease.Observer
}

// NewSQLGuard returns a guard that keeps its records in table, a plain or
// schema-qualified identifier (letters, digits and underscores, at most 63
// bytes a part, PostgreSQL's limit; a reserved word will do, since it is
// quoted in the statements; PostgreSQL takes it in lower case, as it would
// unquoted). The table must have the columns that
// CreateTable creates. NewSQLGuard does no I/O. Of the options, WithObserver
// and WithLogger apply.
func NewSQLGuard(dialect SQLDialect, table string, opts ...Option) (*SQLGuard, error) {
	if !dialect.valid() {
		return nil, invalidf("unknown SQL dialect %q", dialect)
	}
	if !tableRE.MatchString(table) {
		return nil, invalidf("table name %q is not a plain identifier", table)
	}
	p := dialect.placeholder
	g := &SQLGuard{table: table, observers: newConfig(opts).observers}
	quoted := dialect.quote(table)
	// The alias g names the stored row, excluded the offered one. The update
	// branch doubles as the check: when its WHERE fails, no row is affected.
	g.upsert = fmt.Sprintf(`INSERT INTO %s AS g (resource, fence, owner) VALUES (%s, %s, %s)
ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence, owner = excluded.owner
WHERE excluded.fence > g.fence OR (excluded.fence = g.fence AND excluded.owner = g.owner)`,
		quoted, p(1), p(2), p(3))
	g.newest = fmt.Sprintf(`SELECT fence, owner FROM %s WHERE resource = %s`, quoted, p(1))
	g.forget = fmt.Sprintf(`DELETE FROM %s WHERE resource = %s`, quoted, p(1))
	g.ddl = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	resource TEXT NOT NULL PRIMARY KEY,
	fence    BIGINT NOT NULL CHECK (fence > 0),
	owner    TEXT NOT NULL
)`, quoted)
	return g, nil
}

// CreateTable creates the guard's table if it does not exist:
//
//	resource TEXT PRIMARY KEY, fence BIGINT (> 0), owner TEXT
//
// Rows are never deleted by Check: a resource's row must outlive every lease
// of it, or a stale holder could write after the row was gone. Forget
// deletes the row of a resource that is gone for good.
func (g *SQLGuard) CreateTable(ctx context.Context, db SQLTx) error {
	if g == nil || shared.IsNil(db) {
		return invalidf("nil SQLGuard or database")
	}
	if _, err := db.ExecContext(ctx, g.ddl); err != nil {
		return shared.Errorf("create guard table %s: %w", g.table, err)
	}
	return nil
}

// Check admits a write to resource by the holder of fence and owner, inside
// tx, or refuses it. It returns nil if the fencing rule admits the write (and
// records fence and owner as the resource's newest); a *StaleFenceError
// (matching ErrStaleFence) if the resource has accepted a newer fence, or the
// same fence from another owner; redlease.ErrInvalidArgument for an empty
// resource or
// owner, a fence below 1 or a resource name that SQL cannot store (see
// checkResource), before any statement; and a database error otherwise. On
// any error the caller must roll tx back.
//
// Check blocks while another open transaction holds the resource's row, until
// that transaction ends or ctx does. Under PostgreSQL's REPEATABLE READ or
// SERIALIZABLE a concurrent accepted check makes it fail with a serialization
// error; retry the whole transaction then.
//
// Model: model/redlease.pml, inline guard_write.
func (g *SQLGuard) Check(ctx context.Context, tx SQLTx, resource string, fence int64, owner string) (err error) {
	if g != nil && len(g.observers) > 0 {
		defer func(start time.Time) { reportStale(ctx, g.observers, start, err) }(time.Now())
	}
	switch {
	case g == nil:
		return invalidf("nil SQLGuard")
	case shared.IsNil(tx):
		return invalidf("nil transaction")
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if err := checkToken(fence, owner); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, g.upsert, resource, fence, owner)
	if err != nil {
		return shared.Errorf("guard %s: %w", quote(resource), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return shared.Errorf("guard %s: %w", quote(resource), err)
	}
	if n == 1 {
		return nil
	}
	if n != 0 {
		return shared.Errorf("guard %s: the upsert affected %d rows, want 0 or 1", quote(resource), n)
	}
	// Refused: the row exists and the statement locked it, so it reads the
	// same now as when the upsert compared against it.
	var newest int64
	var newestOwner string
	if err := tx.QueryRowContext(ctx, g.newest, resource).Scan(&newest, &newestOwner); err != nil {
		return shared.Errorf("guard %s refused fence %d, and reading its newest failed: %w", quote(resource), fence, err)
	}
	return &StaleFenceError{Resource: resource, Fence: fence, Owner: owner, Newest: newest, NewestOwner: newestOwner}
}

// Forget deletes the guard's row of resource, for a resource that the
// application deletes for good and that no lease will write again: once the
// row is gone, the next Check admits any fence. Run it in the transaction
// that deletes the resource's data, so that a stale holder's Check either
// comes first (and is then deleted with it) or finds the data gone.
func (g *SQLGuard) Forget(ctx context.Context, tx SQLTx, resource string) error {
	if g == nil || shared.IsNil(tx) {
		return invalidf("nil SQLGuard or transaction")
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, g.forget, resource); err != nil {
		return shared.Errorf("guard %s: forget: %w", quote(resource), err)
	}
	return nil
}

// MaxResource is the longest resource name, in bytes, that every guard
// takes: a lease's longest name (redlease.MaxResourceName) and a permit's
// suffix in Key ("#1048575"), so that every key a lease can have is one a
// guard takes. (PostgreSQL refuses a B-tree index entry over 2704 bytes,
// and the SQL guard table's primary key is one.)
const MaxResource = redlease.MaxResourceName + len("#1048575")

// MaxSQLResource is MaxResource: the SQL guards and the others take the
// same names.
//
// Deprecated: use MaxResource.
const MaxSQLResource = MaxResource

// checkResource refuses, before any statement or round trip, a resource
// name that a lease could not have: empty, longer than MaxResource, holding
// a NUL byte or not valid UTF-8 (PostgreSQL's text stores neither).
func checkResource(resource string) error {
	if problem := shared.NameProblem(resource, MaxResource); problem != "" {
		return invalidf("%s", problem)
	}
	return nil
}
