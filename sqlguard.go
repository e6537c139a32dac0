package redlease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
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
// Both are spliced into statements unquoted, so nothing else may pass.
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
// writes it protects, and roll back on any error from it. Under SQLite every
// write transaction holds the database's write lock, which serialises them
// anyway; begin them with BEGIN IMMEDIATE (modernc.org/sqlite: _txlock=immediate)
// so that they queue on busy_timeout instead of failing to upgrade a read lock.
//
// The zero value is not usable; call NewSQLGuard. An SQLGuard is safe for
// concurrent use.
type SQLGuard struct {
	dialect   SQLDialect
	table     string
	upsert    string
	newest    string
	ddl       string
	observers []Observer
}

// NewSQLGuard returns a guard that keeps its records in table, a plain or
// schema-qualified identifier (letters, digits and underscores; spliced into
// SQL unquoted, so PostgreSQL folds it to lower case). The table must have the
// columns that CreateTable creates. NewSQLGuard does no I/O.
func NewSQLGuard(dialect SQLDialect, table string, opts ...Option) (*SQLGuard, error) {
	if !dialect.valid() {
		return nil, invalidf("unknown SQL dialect %q", dialect)
	}
	if !tableRE.MatchString(table) {
		return nil, invalidf("table name %q is not a plain identifier", table)
	}
	p := dialect.placeholder
	g := &SQLGuard{dialect: dialect, table: table, observers: observersOf(opts)}
	// The alias g names the stored row, excluded the offered one. The update
	// branch doubles as the check: when its WHERE fails, no row is affected.
	g.upsert = fmt.Sprintf(`INSERT INTO %s AS g (resource, fence, owner) VALUES (%s, %s, %s)
ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence, owner = excluded.owner
WHERE excluded.fence > g.fence OR (excluded.fence = g.fence AND excluded.owner = g.owner)`,
		table, p(1), p(2), p(3))
	g.newest = fmt.Sprintf(`SELECT fence, owner FROM %s WHERE resource = %s`, table, p(1))
	g.ddl = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	resource TEXT NOT NULL PRIMARY KEY,
	fence    BIGINT NOT NULL CHECK (fence > 0),
	owner    TEXT NOT NULL
)`, table)
	return g, nil
}

// CreateTable creates the guard's table if it does not exist:
//
//	resource TEXT PRIMARY KEY, fence BIGINT (> 0), owner TEXT
//
// Rows are never deleted by the guard: a resource's row must outlive every
// lease of it, or a stale holder could write after the row was gone.
func (g *SQLGuard) CreateTable(ctx context.Context, db SQLTx) error {
	if g == nil || isNil(db) {
		return invalidf("nil SQLGuard or database")
	}
	if _, err := db.ExecContext(ctx, g.ddl); err != nil {
		return fmt.Errorf("redlease: create guard table %s: %w", g.table, err)
	}
	return nil
}

// Check admits a write to resource by the holder of fence and owner, inside
// tx, or refuses it. It returns nil if the fencing rule admits the write (and
// records fence and owner as the resource's newest); a *StaleFenceError
// (matching ErrStaleFence) if the resource has accepted a newer fence, or the
// same fence from another owner; ErrInvalidArgument for an empty resource or
// owner or a fence below 1, before any statement; and a database error
// otherwise. On any error the caller must roll tx back.
//
// Check blocks while another open transaction holds the resource's row, until
// that transaction ends or ctx does. Under PostgreSQL's REPEATABLE READ or
// SERIALIZABLE a concurrent accepted check makes it fail with a serialization
// error; retry the whole transaction then.
func (g *SQLGuard) Check(ctx context.Context, tx SQLTx, resource string, fence int64, owner string) (err error) {
	if g != nil && len(g.observers) > 0 {
		defer func(start time.Time) { reportStale(ctx, g.observers, start, err) }(time.Now())
	}
	switch {
	case g == nil:
		return invalidf("nil SQLGuard")
	case isNil(tx):
		return invalidf("nil transaction")
	case resource == "":
		return invalidf("empty resource name")
	}
	if err := checkToken(fence, owner); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, g.upsert, resource, fence, owner)
	if err != nil {
		return fmt.Errorf("redlease: guard %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("redlease: guard %q: %w", resource, err)
	}
	if n == 1 {
		return nil
	}
	if n != 0 {
		return fmt.Errorf("redlease: guard %q: the upsert affected %d rows, want 0 or 1", resource, n)
	}
	// Refused: the row exists and the statement locked it, so it reads the
	// same now as when the upsert compared against it.
	var newest int64
	var newestOwner string
	if err := tx.QueryRowContext(ctx, g.newest, resource).Scan(&newest, &newestOwner); err != nil {
		return fmt.Errorf("redlease: guard %q refused fence %d, and reading its newest failed: %w", resource, fence, err)
	}
	return &StaleFenceError{Resource: resource, Fence: fence, Owner: owner, Newest: newest, NewestOwner: newestOwner}
}

// RowGuard is the per-row pattern: each row of the caller's own table carries
// the fence (and the owner) of the last write accepted on it, and each write
// is a conditional UPDATE that admits only a fence the rule allows:
//
//	UPDATE invoices SET state = 'paid', last_fence = $2, last_owner = $3
//	WHERE id = $1 AND state = 'pending' AND <Cond(2)>
//
// It needs no extra table and no transaction: the UPDATE is the check. But
// when it changes no row, that alone does not say why; Verify tells a stale
// fence (*StaleFenceError) apart from a missing row or a row in another state
// (ErrNoRowMatched). Zero rows affected is never success.
//
// The fence column must be NOT NULL DEFAULT 0, the owner column NOT NULL
// DEFAULT ”. With no owner column the guard is strict, as in the classic
// pattern (last_fence < $f): each fence is accepted once per row, so a holder
// cannot update the same row twice, and two holders with equal fences after a
// counter reset are told apart only by that.
//
// The zero value is not usable; call NewRowGuard. A RowGuard is safe for
// concurrent use.
type RowGuard struct {
	dialect                 SQLDialect
	table, fenceCol, ownCol string
	newest                  string
	fenceOnly               bool
	observers               []Observer
}

// NewRowGuard returns a guard of rows of table, identified by idColumn, that
// keep the last accepted fence in fenceColumn and its owner in ownerColumn
// (empty for the strict pattern). Names are plain identifiers, spliced into
// SQL unquoted. NewRowGuard does no I/O.
func NewRowGuard(dialect SQLDialect, table, idColumn, fenceColumn, ownerColumn string, opts ...Option) (*RowGuard, error) {
	if !dialect.valid() {
		return nil, invalidf("unknown SQL dialect %q", dialect)
	}
	if !tableRE.MatchString(table) {
		return nil, invalidf("table name %q is not a plain identifier", table)
	}
	for i, c := range []string{idColumn, fenceColumn, ownerColumn} {
		if i == 2 && c == "" { // no owner column: the strict pattern
			continue
		}
		if !identRE.MatchString(c) {
			return nil, invalidf("column name %q is not a plain identifier", c)
		}
	}
	g := &RowGuard{dialect: dialect, table: table, fenceCol: fenceColumn, ownCol: ownerColumn, fenceOnly: ownerColumn == "",
		observers: observersOf(opts)}
	owner := ownerColumn
	if g.fenceOnly {
		owner = "''"
	}
	g.newest = fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = %s",
		fenceColumn, owner, table, idColumn, dialect.placeholder(1))
	return g, nil
}

// Cond returns the condition to AND into the fenced UPDATE's WHERE clause. It
// refers to the fence as argument n and, with an owner column, to the owner
// as argument n+1, using the dialect's numbered placeholders ($n in
// PostgreSQL, ?n in SQLite). Number them after your own arguments; in SQLite,
// put plain ? placeholders only before the condition.
func (g *RowGuard) Cond(n int) string {
	if g == nil {
		return "FALSE"
	}
	f := g.dialect.placeholder(n)
	if g.fenceOnly {
		return fmt.Sprintf("%s < %s", g.fenceCol, f)
	}
	o := g.dialect.placeholder(n + 1)
	return fmt.Sprintf("(%s < %s OR (%s = %s AND %s = %s))", g.fenceCol, f, g.fenceCol, f, g.ownCol, o)
}

// Verify returns nil if res, the result of a fenced UPDATE of the row id,
// changed a row, and otherwise what Explain says.
func (g *RowGuard) Verify(ctx context.Context, tx SQLTx, res sql.Result, id any, fence int64, owner string) error {
	if isNil(res) {
		return invalidf("nil sql.Result")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("redlease: rows affected: %w", err)
	}
	if n > 0 {
		return nil
	}
	return g.Explain(ctx, tx, id, fence, owner)
}

// Explain says why a fenced UPDATE of the row id changed nothing. It reads the
// row's fence (and owner) and returns a *StaleFenceError if the rule refuses
// fence and owner against them, or an error matching ErrNoRowMatched if the
// row is missing or the fence was not the reason (the row is in another
// state). It never returns nil. Run it in the transaction of the UPDATE, if
// any, so that it reads what the UPDATE saw, or later.
func (g *RowGuard) Explain(ctx context.Context, tx SQLTx, id any, fence int64, owner string) (err error) {
	if g != nil && len(g.observers) > 0 {
		defer func(start time.Time) { reportStale(ctx, g.observers, start, err) }(time.Now())
	}
	if g == nil || isNil(tx) {
		return invalidf("nil RowGuard or transaction")
	}
	var (
		newest      sql.NullInt64
		newestOwner sql.NullString
	)
	err = tx.QueryRowContext(ctx, g.newest, id).Scan(&newest, &newestOwner)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s has no row %v", ErrNoRowMatched, g.table, id)
	}
	if err != nil {
		return fmt.Errorf("redlease: reading the fence of %s %v: %w", g.table, id, err)
	}
	stale := !admits(fence, owner, newest.Int64, newestOwner.String)
	if g.fenceOnly {
		stale = fence <= newest.Int64
	}
	if stale {
		return &StaleFenceError{
			Resource: g.table + "/" + fmt.Sprint(id),
			Fence:    fence, Owner: owner, Newest: newest.Int64, NewestOwner: newestOwner.String,
		}
	}
	return fmt.Errorf("%w: row %v of %s is not in the state the update requires", ErrNoRowMatched, id, g.table)
}
