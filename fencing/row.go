package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/shared"
)

// RowGuard is the per-row pattern: each row of the caller's own table carries
// the fence (and the owner) of the last write accepted on it, and each write
// is a conditional UPDATE that admits only a fence the rule allows:
//
//	rows, err := fencing.NewRowGuard(fencing.DialectPostgres, "invoices", "id", "last_fence", "last_owner")
//	...
//	res, err := db.ExecContext(ctx, `UPDATE invoices SET state = 'paid', last_fence = $2, last_owner = $3
//		WHERE id = $1 AND state = 'pending' AND `+rows.Cond(2), id, lease.Fence(), lease.Owner())
//	if err != nil {
//		return err
//	}
//	return rows.Verify(ctx, db, res, id, lease.Fence(), lease.Owner())
//
// It needs no extra table and no transaction: the UPDATE is the check. But
// when it changes no row, that alone does not say why; Verify tells a stale
// fence (*StaleFenceError) apart from a missing row or a row in another state
// (ErrNoRowMatched). Zero rows affected is never success. A runnable example,
// on SQLite, is Example_rowGuard in the tests module
// (github.com/redlease/redlease/tests, file fencing_example_test.go): it
// needs an SQL driver, which this module does not require.
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
	dialect          SQLDialect
	table            string // as given, for messages and StaleFenceError.Resource
	fenceCol, ownCol string // quoted; ownCol is "" for the strict pattern
	newest           string
	observers        []redlease.Observer
}

// NewRowGuard returns a guard of rows of table, identified by idColumn, that
// keep the last accepted fence in fenceColumn and its owner in ownerColumn
// (empty for the strict pattern). Names are plain identifiers of at most 63
// bytes (the table may be schema-qualified), quoted in the SQL it writes, so
// a reserved word will do; PostgreSQL takes them in lower case, as it would
// unquoted. NewRowGuard does no I/O. Of the options,
// WithObserver and WithLogger apply.
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
	q := dialect.quote
	g := &RowGuard{dialect: dialect, table: table, fenceCol: q(fenceColumn), observers: newConfig(opts).observers}
	owner := "''"
	if ownerColumn != "" {
		g.ownCol = q(ownerColumn)
		owner = g.ownCol
	}
	g.newest = fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = %s",
		g.fenceCol, owner, q(table), q(idColumn), dialect.placeholder(1))
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
	if g.ownCol == "" { // the strict pattern
		return fmt.Sprintf("%s < %s", g.fenceCol, f)
	}
	o := g.dialect.placeholder(n + 1)
	return fmt.Sprintf("(%s < %s OR (%s = %s AND %s = %s))", g.fenceCol, f, g.fenceCol, f, g.ownCol, o)
}

// Verify returns nil if res, the result of a fenced UPDATE of the row id,
// changed a row, and otherwise what Explain says.
func (g *RowGuard) Verify(ctx context.Context, tx SQLTx, res sql.Result, id any, fence int64, owner string) error {
	if shared.IsNil(res) {
		return invalidf("nil sql.Result")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return shared.Errorf("rows affected: %w", err)
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
	if g == nil || shared.IsNil(tx) {
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
		return shared.Errorf("reading the fence of %s %v: %w", g.table, id, err)
	}
	stale := fence <= newest.Int64 // the strict pattern: each fence once
	if g.ownCol != "" {
		stale = !admits(fence, owner, newest.Int64, newestOwner.String)
	}
	if stale {
		return &StaleFenceError{
			Resource: g.table + "/" + fmt.Sprint(id),
			Fence:    fence, Owner: owner, Newest: newest.Int64, NewestOwner: newestOwner.String,
		}
	}
	return fmt.Errorf("%w: row %v of %s is not in the state the update requires", ErrNoRowMatched, id, g.table)
}
