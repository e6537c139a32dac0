package redlease

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The headers that carry a holder's token to an HTTP service, and the one a
// refusal carries back.
const (
	// HeaderFencingToken carries the fence, a decimal integer above 0.
	HeaderFencingToken = "Fencing-Token"
	// HeaderFencingResource carries the name of the leased resource.
	HeaderFencingResource = "Fencing-Resource"
	// HeaderFencingOwner carries the lease's owner token, which tells two
	// holders with equal fences apart.
	HeaderFencingOwner = "Fencing-Owner"
	// HeaderFencingNewest is set on a 409 answer: the newest fence the service
	// has accepted for the resource, for Client.AdvanceFence.
	HeaderFencingNewest = "Fencing-Newest"
)

// Limits of what HTTPGuard accepts in the headers, in bytes.
const (
	maxOwnerHeader    = 256
	maxResourceHeader = 1024
)

// SetFenceHeaders sets the fencing headers of h to l's token: its fence,
// resource and owner. Set them on every request that writes to the protected
// service. A nil l or h sets nothing, and an HTTPGuard refuses such a request.
// The resource name must be a valid header value (no control characters), as
// resource names normally are; otherwise the HTTP client refuses to send it.
func SetFenceHeaders(h http.Header, l *Lease) {
	if h == nil || l == nil {
		return
	}
	h.Set(HeaderFencingToken, strconv.FormatInt(l.Fence(), 10))
	h.Set(HeaderFencingResource, l.Resource())
	h.Set(HeaderFencingOwner, l.Owner())
}

// FenceStore is where an HTTPGuard keeps the newest fence accepted per
// resource.
type FenceStore interface {
	// Admit applies the fencing rule to fence and owner for resource: it
	// accepts them iff fence > newest, or fence == newest and owner is the
	// owner recorded with newest (or nothing is recorded yet), and then
	// records them as the resource's newest. Refusing, it returns a
	// *StaleFenceError and records nothing. Accepting, it returns done, which
	// the caller calls exactly once when the write it admitted is over; a
	// store may hold the resource for that write until then.
	Admit(ctx context.Context, resource string, fence int64, owner string) (done func(), err error)
}

var (
	_ FenceStore = (*MemoryFenceStore)(nil)
	_ FenceStore = (*RedisFenceStore)(nil)
)

// HTTPGuard is net/http middleware for a service that receives fenced writes:
// it reads the token from the request's fencing headers, asks Store to admit
// it, and only then calls the wrapped handler. It answers without calling the
// handler:
//
//   - 428 Precondition Required when a fencing header is missing or empty;
//   - 400 Bad Request when one is malformed (a token that is not a decimal
//     integer in 1..2^63-1, a header given twice, an owner over 256 bytes or a
//     resource over 1024 bytes, a token the store cannot take) or names
//     another resource than ResourceOf;
//   - 409 Conflict when the token is stale, with HeaderFencingNewest;
//   - 503 Service Unavailable when the store cannot answer.
//
// Answers are plain text and start with "redlease: ". Wrap every handler that
// writes to the protected resource: one unguarded write path voids the rest.
type HTTPGuard struct {
	// Store keeps the newest fence per resource. Required.
	Store FenceStore
	// ResourceOf, if set, names the resource that a request writes to (from
	// its path, say), so that a client cannot pass a fence of one resource
	// off as one of another. A request for which it returns "" is refused, and
	// so is one whose Fencing-Resource header names another resource; the
	// header may then be left out. If nil, the header names the resource.
	ResourceOf func(*http.Request) string
	// Observer, if set, sees each refused request as an EventStaleFence.
	Observer Observer
}

// Wrap returns next behind the guard. It panics if Store or next is nil. The
// guard is read when Wrap is called; later changes to it have no effect.
func (g HTTPGuard) Wrap(next http.Handler) http.Handler {
	if isNil(g.Store) || next == nil {
		panic("redlease: HTTPGuard.Wrap needs a Store and a handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource, fence, owner, herr := g.token(r)
		if herr != nil {
			http.Error(w, herr.msg, herr.status)
			return
		}
		start := time.Now()
		done, err := g.Store.Admit(r.Context(), resource, fence, owner)
		var stale *StaleFenceError
		switch {
		case errors.As(err, &stale):
			if g.Observer != nil {
				reportStale(r.Context(), []Observer{g.Observer}, start, err)
			}
			w.Header().Set(HeaderFencingNewest, strconv.FormatInt(stale.Newest, 10))
			http.Error(w, stale.Error(), http.StatusConflict)
			return
		case errors.Is(err, ErrInvalidArgument):
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case err != nil: // the store's details stay on the server
			http.Error(w, "redlease: the fencing token cannot be checked now; retry later", http.StatusServiceUnavailable)
			return
		}
		defer done()
		next.ServeHTTP(w, r)
	})
}

// headerError is an answer of the guard to a request whose headers it refuses.
type headerError struct {
	status int
	msg    string
}

func badHeader(format string, args ...any) *headerError {
	return &headerError{http.StatusBadRequest, "redlease: " + fmt.Sprintf(format, args...)}
}

// token reads the fencing headers of r.
func (g HTTPGuard) token(r *http.Request) (resource string, fence int64, owner string, herr *headerError) {
	header := func(name string, required bool) (string, *headerError) {
		vs := r.Header.Values(name)
		switch {
		case len(vs) > 1:
			return "", badHeader("%s header given %d times", name, len(vs))
		case (len(vs) == 0 || vs[0] == "") && required:
			return "", &headerError{http.StatusPreconditionRequired,
				"redlease: missing " + name + " header: a fenced write must carry its lease's fencing token"}
		case len(vs) == 0:
			return "", nil
		}
		return vs[0], nil
	}
	text, herr := header(HeaderFencingToken, true)
	if herr != nil {
		return "", 0, "", herr
	}
	if fence = parseFence(text); fence <= 0 {
		return "", 0, "", badHeader("%s %q is not a decimal integer in 1..%d", HeaderFencingToken, text, int64(1<<63-1))
	}
	if owner, herr = header(HeaderFencingOwner, true); herr != nil {
		return "", 0, "", herr
	}
	if len(owner) > maxOwnerHeader {
		return "", 0, "", badHeader("%s header is over %d bytes", HeaderFencingOwner, maxOwnerHeader)
	}
	if resource, herr = header(HeaderFencingResource, g.ResourceOf == nil); herr != nil {
		return "", 0, "", herr
	}
	if len(resource) > maxResourceHeader {
		return "", 0, "", badHeader("%s header is over %d bytes", HeaderFencingResource, maxResourceHeader)
	}
	if g.ResourceOf != nil {
		want := g.ResourceOf(r)
		switch {
		case want == "":
			return "", 0, "", badHeader("this request writes to no resource that takes fenced writes")
		case resource != "" && resource != want:
			return "", 0, "", badHeader("%s %q is not the resource this request writes to", HeaderFencingResource, resource)
		}
		resource = want
	}
	return resource, fence, owner, nil
}

// parseFence returns the fence written in s, or 0 if s is not a decimal
// integer in 1..2^63-1. Signs and spaces, which ParseInt would take, are not
// accepted.
func parseFence(s string) int64 {
	if s == "" || len(s) > 19 {
		return 0
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// MemoryFenceStore is a FenceStore in the memory of one process: for a single
// gateway in front of a service that cannot check fences itself (a legacy
// system, an object store). It admits one request per resource at a time: a
// request's Admit waits while another admitted request of the same resource is
// still being handled, until its done is called. The check, the record and
// the handler's write to the service are therefore atomic within the process,
// and the service sees a resource's writes in an order in which the fences
// never go back.
//
// Its guarantees hold only while every write to the service passes through
// this one process, and only for as long as the process lives: a restart
// forgets every fence (a new gateway accepts a stale holder that comes back
// before the current one writes again), and a second gateway process has
// fences of its own. A handler that returns before its write is done (a
// write handed to a background goroutine) escapes the serialisation. It
// keeps one small entry per resource ever seen, for the life of the process;
// with ResourceOf unset, clients choose the resource names.
//
// The zero value is an empty store, ready for use. It must not be copied
// after first use.
type MemoryFenceStore struct {
	mu sync.Mutex
	m  map[string]*memFence
}

// memFence is one resource's entry. turn holds a value while a request of the
// resource is admitted; newest and owner are read and written only by the
// goroutine that holds it.
type memFence struct {
	turn   chan struct{}
	newest int64
	owner  string
}

// Admit implements FenceStore. It waits for the resource's turn until ctx
// ends, and then returns an error that matches ctx.Err(). It returns
// ErrInvalidArgument for an empty resource or owner or a fence below 1.
func (s *MemoryFenceStore) Admit(ctx context.Context, resource string, fence int64, owner string) (func(), error) {
	if s == nil {
		return nil, invalidf("nil MemoryFenceStore")
	}
	if resource == "" {
		return nil, invalidf("empty resource name")
	}
	if err := checkToken(fence, owner); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*memFence)
	}
	e := s.m[resource]
	if e == nil {
		e = &memFence{turn: make(chan struct{}, 1)}
		s.m[resource] = e
	}
	s.mu.Unlock()

	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("redlease: waiting for %q: %w", resource, context.Cause(ctx))
	}
	if !admits(fence, owner, e.newest, e.owner) {
		err := &StaleFenceError{Resource: resource, Fence: fence, Owner: owner, Newest: e.newest, NewestOwner: e.owner}
		<-e.turn
		return nil, err
	}
	e.newest, e.owner = fence, owner
	return sync.OnceFunc(func() { <-e.turn }), nil
}

// admitScript records an admitted fence and does nothing else.
var admitScript = NewFencedScript("return 1")

// RedisFenceStore is a FenceStore in Redis, for several gateway processes in
// front of one service: each Admit is one Lua script that checks the fence
// against the record of the resource and records it, atomically, so no two
// gateways admit the same fence from two owners, and none admits a fence
// after a newer one was recorded. The record of resource R is a hash {fence,
// owner} at "<prefix>{R}:accepted", without a TTL; prefix is DefaultPrefix
// unless WithPrefix says otherwise.
//
// What it does not make atomic is the check with the write to the service:
// done is a no-op and requests are not serialised. A request admitted with
// fence 33 may still be on its way to the service when a request with 34 is
// admitted and written, and then 33's write lands after 34's. It stops every
// stale request that arrives after a newer one was admitted, not one that was
// admitted first and is slow. Use it where the service's writes are quick
// next to the lease TTL and a late one does no harm, or make the service check
// fences itself; for strict ordering, send all writes of a resource through
// one gateway with a MemoryFenceStore. The records are as durable as that
// Redis: a failover or a restart without persistence can lose them, and
// records lost let a stale holder through.
type RedisFenceStore struct {
	rdb    redis.UniversalClient
	prefix string
	err    error // an invalid prefix, returned by Admit
}

// NewRedisFenceStore returns a store that keeps its records through rdb: a
// plain, Sentinel (failover) or cluster go-redis client, the leases' Redis or
// another. A nil rdb makes Admit return ErrInvalidArgument. Of the options,
// WithPrefix applies: it sets the prefix of the records' keys (default
// DefaultPrefix), to keep several applications' records apart on one Redis.
// Gateways in front of one service must agree on it: each prefix is a record
// of its own. A prefix with a '{' makes Admit return ErrInvalidArgument:
// the record of resource R is <prefix>{R}:accepted, and the braces must
// delimit R, or two prefixes could share records.
func NewRedisFenceStore(rdb redis.UniversalClient, opts ...Option) *RedisFenceStore {
	s := &RedisFenceStore{rdb: rdb, prefix: guardConfig(opts).prefix}
	if strings.Contains(s.prefix, "{") {
		s.err = invalidf("key prefix %q holds a '{'", s.prefix)
	}
	return s
}

// Admit implements FenceStore in one round trip. Besides a *StaleFenceError
// it returns ErrInvalidArgument for an empty resource or owner, or a fence
// outside 1..MaxFence, and errors of the request (matching ErrOutcomeUnknown
// when the fence may have been recorded).
func (s *RedisFenceStore) Admit(ctx context.Context, resource string, fence int64, owner string) (func(), error) {
	switch {
	case s == nil || isNil(s.rdb):
		return nil, invalidf("nil RedisFenceStore or Redis client")
	case s.err != nil:
		return nil, s.err
	case resource == "":
		return nil, invalidf("empty resource name")
	}
	record := s.prefix + "{" + resource + "}:accepted"
	if _, err := runFenced(ctx, s.rdb, admitScript.s, resource, record, nil, fence, owner, nil); err != nil {
		return nil, err
	}
	return func() {}, nil
}
