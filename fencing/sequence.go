package fencing

import (
	"context"
	"database/sql"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/shared"
)

// Sequence is a redlease.FenceSource backed by one PostgreSQL sequence,
// through database/sql with any PostgreSQL driver: pass it to
// redlease.WithFenceSource. nextval never hands out a value twice, not even
// after a crash (it may skip values, which fencing allows), and a PostgreSQL
// primary with synchronous replication keeps that across its own failover:
// the fences stop depending on Redis's asynchronous replication. One
// sequence serves every resource.
type Sequence struct {
	db     *sql.DB
	name   string // as given, for messages
	quoted string // for the statements
}

var _ redlease.FenceSource = (*Sequence)(nil)

// NewSequence returns a source drawing from the sequence name (an
// identifier of letters, digits and underscores, at most 63 bytes a part,
// optionally schema-qualified: PostgreSQL would silently cut a longer one,
// and two names could then name one sequence). The name is quoted in the
// statements, so a reserved word will do; PostgreSQL takes it in lower
// case, as it would unquoted. Create makes the sequence. It does no I/O.
func NewSequence(db *sql.DB, name string) (*Sequence, error) {
	if shared.IsNil(db) {
		return nil, invalidf("nil database")
	}
	if !tableRE.MatchString(name) {
		return nil, invalidf("sequence name %q is not a plain identifier of at most 63 bytes a part", name)
	}
	return &Sequence{db: db, name: name, quoted: DialectPostgres.quote(name)}, nil
}

// Create creates the sequence if it does not exist.
func (s *Sequence) Create(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "CREATE SEQUENCE IF NOT EXISTS "+s.quoted); err != nil {
		return shared.Errorf("create sequence %s: %w", s.name, err)
	}
	return nil
}

// NextFence draws the sequence's next value.
func (s *Sequence) NextFence(ctx context.Context, _ string) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, "SELECT nextval($1::regclass)", s.quoted).Scan(&n); err != nil {
		return 0, shared.Errorf("nextval(%s): %w", s.name, err)
	}
	return n, nil
}
