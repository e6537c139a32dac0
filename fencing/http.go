package fencing

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/shared"
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
	// has accepted for the resource, for redlease.Client.AdvanceFence.
	HeaderFencingNewest = "Fencing-Newest"
)

// maxOwnerHeader is the longest owner HTTPGuard accepts in its header, in
// bytes.
const maxOwnerHeader = 256

// SetHeaders sets the fencing headers of h to l's token: its fence,
// resource (Key(l): for a semaphore's permit, the resource and the permit)
// and owner. Set them on every request that writes to the protected
// service. A nil l or h sets nothing, and an HTTPGuard refuses such a request.
// The resource name must be a valid header value (no control characters), as
// resource names normally are; otherwise the HTTP client refuses to send it.
func SetHeaders(h http.Header, l *redlease.Lease) {
	if h == nil || l == nil {
		return
	}
	h.Set(HeaderFencingToken, strconv.FormatInt(l.Fence(), 10))
	h.Set(HeaderFencingResource, Key(l)) // a permit is fenced on its own
	h.Set(HeaderFencingOwner, l.Owner())
}

// HTTPGuard is net/http middleware for a service that receives fenced writes:
// it reads the token from the request's fencing headers, asks Store to admit
// it, and only then calls the wrapped handler. It answers without calling the
// handler:
//
//   - 428 Precondition Required when a fencing header is missing or empty;
//   - 400 Bad Request when one is malformed (a token that is not a decimal
//     integer in 1..2^63-1, a header given twice, an owner over 256 bytes, a
//     resource name that no lease has (over MaxResource bytes, a NUL byte,
//     invalid UTF-8), a token the store cannot take) or names
//     another resource than ResourceOf;
//   - 409 Conflict when the token is stale, with HeaderFencingNewest;
//   - 503 Service Unavailable when the store cannot answer.
//
// Answers are plain text and start with "redlease: ". Wrap every handler that
// writes to the protected resource: one unguarded write path voids the rest.
type HTTPGuard struct {
	// Store keeps the newest fence per resource. Required.
	Store Store
	// ResourceOf, if set, names the resource that a request writes to (from
	// its path, say), so that a client cannot pass a fence of one resource
	// off as one of another. A request for which it returns "" is refused, and
	// so is one whose Fencing-Resource header names another resource; the
	// header may then be left out. If nil, the header names the resource.
	ResourceOf func(*http.Request) string
	// Observer, if set, sees each refused request as an EventStaleFence.
	Observer redlease.Observer
}

// Wrap returns next behind the guard. It panics if Store or next is nil, or
// if Store is a RedisStore that would refuse every Admit (a nil Redis client,
// a prefix with a '{'). The guard is read when Wrap is called; later changes
// to it have no effect.
func (g HTTPGuard) Wrap(next http.Handler) http.Handler {
	if shared.IsNil(g.Store) || next == nil {
		panic("fencing: HTTPGuard.Wrap needs a Store and a handler")
	}
	// A misconfigured store is the server's fault: served, it would answer
	// every request 400, as if each client's token were malformed, with the
	// server's configuration in the body. It is caught here, at start-up.
	if c, ok := g.Store.(interface{ configError() error }); ok {
		if err := c.configError(); err != nil {
			panic("fencing: HTTPGuard.Wrap: unusable Store: " + err.Error())
		}
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
				reportStale(r.Context(), []redlease.Observer{g.Observer}, start, err)
			}
			w.Header().Set(HeaderFencingNewest, strconv.FormatInt(stale.Newest, 10))
			http.Error(w, stale.Error(), http.StatusConflict)
			return
		case errors.Is(err, redlease.ErrInvalidArgument):
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
	if problem := shared.NameProblem(resource, MaxResource); problem != "" && resource != "" {
		return "", 0, "", badHeader("%s header: %s", HeaderFencingResource, problem)
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
