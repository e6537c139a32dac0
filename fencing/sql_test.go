package fencing

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
)

// The SQL guards' tests that need no database. Those that run the guards on
// SQLite and PostgreSQL are in the tests module (tests/fencing_sql_test.go),
// which may require SQL drivers; this module may not.

// fakeTx fails the test if a guard sends it a statement.
type fakeTx struct{ t *testing.T }

func (f fakeTx) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	f.t.Error("statement sent for invalid input")
	return nil, errors.New("unexpected")
}

func (f fakeTx) QueryRowContext(context.Context, string, ...any) *sql.Row {
	f.t.Error("query sent for invalid input")
	return nil
}

func TestSQLGuardRejectsBadInputWithoutStatements(t *testing.T) {
	for _, table := range []string{"", "a b", "x;drop table y", "1abc", "a.b.c", `"q"`, "a-b", "ä",
		strings.Repeat("t", 70)} {
		_, err := NewSQLGuard(DialectPostgres, table)
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "table %q", table)
		_, err = NewRowGuard(DialectSQLite, table, "id", "f", "o")
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "table %q", table)
	}
	for _, table := range []string{"guards", "public.fence_guard", "_x1", "T"} {
		_, err := NewSQLGuard(DialectSQLite, table)
		require.NoError(t, err, "table %q", table)
	}
	_, err := NewSQLGuard("mysql", "guards")
	require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	for _, cols := range [][3]string{{"", "f", "o"}, {"id", "", "o"}, {"id", "f", "o o"}, {"id;", "f", ""}} {
		_, err := NewRowGuard(DialectPostgres, "t", cols[0], cols[1], cols[2])
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "columns %q", cols)
	}

	g, err := NewSQLGuard(DialectPostgres, "guards")
	require.NoError(t, err)
	tx := fakeTx{t}
	for _, c := range []struct {
		resource string
		fence    int64
		owner    string
	}{{"", 1, "o"}, {"r", 0, "o"}, {"r", -1, "o"}, {"r", 1, ""},
		{"a\x00b", 1, "o"}, {"\xff\xfe", 1, "o"}, {strings.Repeat("r", MaxSQLResource+1), 1, "o"}} {
		require.ErrorIs(t, g.Check(t.Context(), tx, c.resource, c.fence, c.owner), redlease.ErrInvalidArgument, "%+v", c)
	}
	require.ErrorIs(t, g.Check(t.Context(), nil, "r", 1, "o"), redlease.ErrInvalidArgument)
	require.ErrorIs(t, (*SQLGuard)(nil).Check(t.Context(), tx, "r", 1, "o"), redlease.ErrInvalidArgument)
	require.ErrorIs(t, (*RowGuard)(nil).Explain(t.Context(), tx, 1, 1, "o"), redlease.ErrInvalidArgument)
}

func TestRowGuardCond(t *testing.T) {
	pg, err := NewRowGuard(DialectPostgres, "t", "id", "last_fence", "last_owner")
	require.NoError(t, err)
	require.Equal(t, `("last_fence" < $4 OR ("last_fence" = $4 AND "last_owner" = $5))`, pg.Cond(4))
	lite, err := NewRowGuard(DialectSQLite, "t", "id", "last_fence", "")
	require.NoError(t, err)
	require.Equal(t, "[last_fence] < ?2", lite.Cond(2))

	// Only the owner column may be left out.
	for _, cols := range [][3]string{{"", "last_fence", ""}, {"id", "", ""}, {"", "", ""}, {"id", "", "last_owner"}} {
		_, err := NewRowGuard(DialectPostgres, "t", cols[0], cols[1], cols[2])
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%q", cols)
	}
}
