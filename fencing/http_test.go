package fencing

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// forEachStore runs f with a MemoryStore and with a RedisStore on a
// real redis-server.
func forEachStore(t *testing.T, f func(t *testing.T, store Store)) {
	t.Run("memory", func(t *testing.T) { f(t, &MemoryStore{}) })
	t.Run("redis", func(t *testing.T) { f(t, NewRedisStore(servertest.Redis(t).Client(t))) })
}

// ledger is the legacy service behind the gateway: it records each payment,
// and how many requests it was handling at once at most.
type ledger struct {
	mu       sync.Mutex
	payments []token
	inFlight atomic.Int64
	maxIn    atomic.Int64
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	for m := l.maxIn.Load(); n > m && !l.maxIn.CompareAndSwap(m, n); m = l.maxIn.Load() {
	}
	fence, _ := strconv.ParseInt(r.Header.Get(HeaderFencingToken), 10, 64)
	time.Sleep(100 * time.Microsecond) // a write that takes a while, so that requests overlap
	l.mu.Lock()
	l.payments = append(l.payments, token{fence, r.Header.Get(HeaderFencingOwner)})
	l.mu.Unlock()
	fmt.Fprintln(w, "paid")
}

func (l *ledger) snapshot() []token {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]token(nil), l.payments...)
}

// answer is what a request got back.
type answer struct {
	status int
	body   string
	header http.Header
}

// send POSTs to url with the header h.
func send(t testing.TB, url string, h http.Header) answer {
	t.Helper()
	a, err := post(url, h)
	require.NoError(t, err)
	return a
}

// post is send for goroutines other than the test's.
func post(url string, h http.Header) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("amount=30"))
	if err != nil {
		return answer{}, err
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(body), resp.Header}, err
}

func tokenHeader(resource string, fence int64, owner string) http.Header {
	h := http.Header{}
	h.Set(HeaderFencingResource, resource)
	h.Set(HeaderFencingToken, strconv.FormatInt(fence, 10))
	h.Set(HeaderFencingOwner, owner)
	return h
}

// The seeds' story through a gateway: A (33) freezes past its TTL, B (34)
// pays through the gateway, A's late request gets 409 and the ledger has one
// payment.
func TestHTTPGuardDoublePaymentStory(t *testing.T) {
	forEachStore(t, func(t *testing.T, store Store) {
		svc := &ledger{}
		srv := httptest.NewServer(HTTPGuard{Store: store}.Wrap(svc))
		defer srv.Close()
		pay := func(l *redlease.Lease) answer {
			h := http.Header{}
			SetHeaders(h, l)
			return send(t, srv.URL+"/pay", h)
		}

		a, b := staleAndCurrent(t)
		require.Equal(t, http.StatusOK, pay(b).status)

		got := pay(a) // A wakes up
		require.Equal(t, http.StatusConflict, got.status)
		require.Equal(t, `redlease: stale fence 33 for "invoice:42": newest accepted is 34`+"\n", got.body)
		require.Equal(t, "34", got.header.Get(HeaderFencingNewest))
		require.Equal(t, "text/plain; charset=utf-8", got.header.Get("Content-Type"))
		require.Equal(t, []token{{34, b.Owner()}}, svc.snapshot(), "paid exactly once, by B")
	})
}

func TestHTTPGuardEqualFenceRule(t *testing.T) {
	forEachStore(t, func(t *testing.T, store Store) {
		svc := &ledger{}
		srv := httptest.NewServer(HTTPGuard{Store: store}.Wrap(svc))
		defer srv.Close()
		steps := []struct {
			resource string
			fence    int64
			owner    string
			status   int
		}{
			{"r", 5, "a", http.StatusOK},
			{"r", 5, "a", http.StatusOK}, // the same holder writes again
			{"r", 5, "b", http.StatusConflict},
			{"r", 4, "a", http.StatusConflict},
			{"r", 6, "b", http.StatusOK},
			{"r", 6, "a", http.StatusConflict},
			{"r2", 1, "z", http.StatusOK}, // another resource, its own fences
		}
		var want []token
		for i, s := range steps {
			got := send(t, srv.URL, tokenHeader(s.resource, s.fence, s.owner))
			require.Equal(t, s.status, got.status, "step %d: %s", i, got.body)
			if s.status == http.StatusOK {
				want = append(want, token{s.fence, s.owner})
			}
		}
		require.Equal(t, want, svc.snapshot())
		got := send(t, srv.URL, tokenHeader("r", 6, "a"))
		require.Equal(t, `redlease: stale fence 6 for "r": it was already accepted from another owner`+"\n", got.body)
	})
}

// Bad headers get a clear 4xx and never reach the service, whatever they hold.
func TestHTTPGuardRefusesBadHeaders(t *testing.T) {
	redisStore := NewRedisStore(servertest.Redis(t).Client(t))
	long := strings.Repeat("x", 2000)
	cases := []struct {
		name   string
		header http.Header
		status int
		body   string
	}{
		{"no headers", http.Header{}, 428, "missing Fencing-Token"},
		{"no owner", http.Header{"Fencing-Token": {"5"}, "Fencing-Resource": {"r"}}, 428, "missing Fencing-Owner"},
		{"no resource", http.Header{"Fencing-Token": {"5"}, "Fencing-Owner": {"o"}}, 428, "missing Fencing-Resource"},
		{"empty token", http.Header{"Fencing-Token": {""}, "Fencing-Owner": {"o"}, "Fencing-Resource": {"r"}}, 428, "missing Fencing-Token"},
		{"letters", tokenHeaderText("r", "abc", "o"), 400, `"abc" is not a decimal integer`},
		{"zero", tokenHeaderText("r", "0", "o"), 400, "not a decimal integer"},
		{"negative", tokenHeaderText("r", "-5", "o"), 400, "not a decimal integer"},
		{"plus sign", tokenHeaderText("r", "+5", "o"), 400, "not a decimal integer"},
		{"space", tokenHeaderText("r", "5 6", "o"), 400, "not a decimal integer"},
		{"float", tokenHeaderText("r", "5.0", "o"), 400, "not a decimal integer"},
		{"overflow", tokenHeaderText("r", "9223372036854775808", "o"), 400, "not a decimal integer"},
		{"far too long", tokenHeaderText("r", long, "o"), 400, "not a decimal integer"},
		{"two tokens", http.Header{"Fencing-Token": {"5", "6"}, "Fencing-Owner": {"o"}, "Fencing-Resource": {"r"}}, 400, "given 2 times"},
		{"two owners", http.Header{"Fencing-Token": {"5"}, "Fencing-Owner": {"o", "p"}, "Fencing-Resource": {"r"}}, 400, "given 2 times"},
		{"long owner", tokenHeaderText("r", "5", long), 400, "Fencing-Owner header is over 256 bytes"},
		{"long resource", tokenHeaderText(long, "5", "o"), 400, "Fencing-Resource header: resource name"},
	}
	for _, store := range []Store{&MemoryStore{}, redisStore} {
		svc := &ledger{}
		srv := httptest.NewServer(HTTPGuard{Store: store}.Wrap(svc))
		for _, c := range cases {
			got := send(t, srv.URL, c.header)
			require.Equal(t, c.status, got.status, "%T %s: %s", store, c.name, got.body)
			require.Contains(t, got.body, c.body, "%T %s", store, c.name)
			require.True(t, strings.HasPrefix(got.body, "redlease: "), got.body)
		}
		// The largest token: the memory store takes it, the Redis store cannot
		// compare it exactly and refuses it as a bad request.
		got := send(t, srv.URL, tokenHeaderText("max", "9223372036854775807", "o"))
		if _, ok := store.(*RedisStore); ok {
			require.Equal(t, http.StatusBadRequest, got.status, got.body)
			require.Contains(t, got.body, "MaxFence")
			require.Empty(t, svc.snapshot())
		} else {
			require.Equal(t, http.StatusOK, got.status, got.body)
			require.Len(t, svc.snapshot(), 1)
		}
		srv.Close()
	}
}

func tokenHeaderText(resource, fence, owner string) http.Header {
	return http.Header{"Fencing-Token": {fence}, "Fencing-Owner": {owner}, "Fencing-Resource": {resource}}
}

// With ResourceOf, the request's path names the resource; the header may be
// left out but may not name another resource.
func TestHTTPGuardResourceOf(t *testing.T) {
	svc := &ledger{}
	guard := HTTPGuard{Store: &MemoryStore{}, ResourceOf: func(r *http.Request) string {
		id, ok := strings.CutPrefix(r.URL.Path, "/invoices/")
		if !ok || id == "" {
			return ""
		}
		return "invoice:" + id
	}}
	srv := httptest.NewServer(guard.Wrap(svc))
	defer srv.Close()

	noResource := http.Header{"Fencing-Token": {"7"}, "Fencing-Owner": {"o"}}
	require.Equal(t, http.StatusOK, send(t, srv.URL+"/invoices/42", noResource).status)
	require.Equal(t, http.StatusOK, send(t, srv.URL+"/invoices/42", tokenHeader("invoice:42", 7, "o")).status)
	got := send(t, srv.URL+"/invoices/42", tokenHeader("invoice:43", 8, "o"))
	require.Equal(t, http.StatusBadRequest, got.status)
	require.Contains(t, got.body, `"invoice:43" is not the resource this request writes to`)
	got = send(t, srv.URL+"/other", noResource)
	require.Equal(t, http.StatusBadRequest, got.status)
	require.Contains(t, got.body, "writes to no resource")
	// The fence of invoice 42 does not block invoice 43, and vice versa.
	require.Equal(t, http.StatusOK, send(t, srv.URL+"/invoices/43", http.Header{"Fencing-Token": {"1"}, "Fencing-Owner": {"p"}}).status)
	require.Equal(t, http.StatusConflict, send(t, srv.URL+"/invoices/42", http.Header{"Fencing-Token": {"6"}, "Fencing-Owner": {"o"}}).status)
	require.Len(t, svc.snapshot(), 3)
}

// A store that cannot answer gives 503, without its details.
func TestHTTPGuardStoreDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: servertest.RefusedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	svc := &ledger{}
	srv := httptest.NewServer(HTTPGuard{Store: NewRedisStore(rdb)}.Wrap(svc))
	defer srv.Close()
	got := send(t, srv.URL, tokenHeader("r", 1, "o"))
	require.Equal(t, http.StatusServiceUnavailable, got.status)
	require.Equal(t, "redlease: the fencing token cannot be checked now; retry later\n", got.body)
	require.Empty(t, svc.snapshot())
}

// Many clients pay at once through one gateway with a MemoryStore: the
// service handles one request per resource at a time, and the payments it
// sees never go back.
func TestHTTPGuardMemoryStoreSerialisesPerResource(t *testing.T) {
	svc := &ledger{}
	srv := httptest.NewServer(HTTPGuard{Store: &MemoryStore{}}.Wrap(svc))
	defer srv.Close()
	const workers, perWorker = 8, 25
	refused := raceFences(t, workers, perWorker, 40, func(fence int64, owner string) error {
		got, err := post(srv.URL, tokenHeader("r", fence, owner))
		if err != nil {
			return err
		}
		switch got.status {
		case http.StatusOK:
			return nil
		case http.StatusConflict:
			newest, err := strconv.ParseInt(got.header.Get(HeaderFencingNewest), 10, 64)
			if err != nil {
				return err
			}
			// The owner of the newest fence is not sent back, so an equal
			// fence is checked only for being a refusal.
			return &StaleFenceError{Resource: "r", Fence: fence, Owner: owner, Newest: newest}
		}
		return fmt.Errorf("status %d: %s", got.status, got.body)
	})
	requireNeverBack(t, svc.snapshot(), refused, workers*perWorker)
	require.Equal(t, int64(1), svc.maxIn.Load(), "one request per resource at a time")
}

// Gateways sharing a RedisStore: many requests with the same fence from
// different owners race; exactly one of each round is admitted.
func TestHTTPGuardRedisStoreAdmitsOneOwnerPerFence(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	svc := &ledger{}
	var urls []string
	for range 3 { // three gateways, one store
		srv := httptest.NewServer(HTTPGuard{Store: NewRedisStore(rdb)}.Wrap(svc))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	const rounds, racers = 10, 8
	for round := range rounds {
		fence := int64(round + 1)
		var wg sync.WaitGroup
		statuses := make([]int, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, _ := post(urls[i%len(urls)], tokenHeader("r", fence, fmt.Sprintf("owner-%d-%d", round, i)))
				statuses[i] = got.status // 0 if the request failed
			}()
		}
		wg.Wait()
		ok, conflict := 0, 0
		for _, s := range statuses {
			switch s {
			case http.StatusOK:
				ok++
			case http.StatusConflict:
				conflict++
			}
		}
		require.Equal(t, 1, ok, "round %d: %v", round, statuses)
		require.Equal(t, racers-1, conflict, "round %d: %v", round, statuses)
	}
	require.Len(t, svc.snapshot(), rounds)
}

func TestMemoryStoreWaitsForTheTurn(t *testing.T) {
	s := &MemoryStore{}
	ctx := t.Context()
	done, err := s.Admit(ctx, "r", 1, "a")
	require.NoError(t, err)

	// Another resource is not held up.
	doneOther, err := s.Admit(ctx, "other", 1, "a")
	require.NoError(t, err)
	doneOther()

	// The same resource waits until done, or until its ctx ends.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = s.Admit(short, "r", 2, "b")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	admitted := make(chan error, 1)
	go func() {
		d, err := s.Admit(ctx, "r", 2, "b")
		if err == nil {
			d()
		}
		admitted <- err
	}()
	done()
	done() // a second call is harmless
	select {
	case err := <-admitted:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Admit still waiting after done")
	}
	_, err = s.Admit(ctx, "r", 1, "a")
	require.ErrorIs(t, err, ErrStaleFence)

	for _, c := range []struct {
		resource string
		fence    int64
		owner    string
	}{{"", 1, "o"}, {"r", 0, "o"}, {"r", 1, ""}} {
		_, err := s.Admit(ctx, c.resource, c.fence, c.owner)
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%+v", c)
	}
	_, err = (*MemoryStore)(nil).Admit(ctx, "r", 1, "o")
	require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	_, err = NewRedisStore(nil).Admit(ctx, "r", 1, "o")
	require.ErrorIs(t, err, redlease.ErrInvalidArgument)
}

// WithPrefix namespaces a RedisStore's records; the default stays
// "redlease:{R}:accepted".
func TestRedisStoreRecordPrefix(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	_, err := NewRedisStore(rdb).Admit(ctx, "r", 7, "o")
	require.NoError(t, err)
	require.Equal(t, "7", mr.HGet("redlease:{r}:accepted", "fence"))

	app1 := NewRedisStore(rdb, WithPrefix("app1:"))
	_, err = app1.Admit(ctx, "r", 3, "o")
	require.NoError(t, err, "another prefix, another record")
	require.Equal(t, "3", mr.HGet("app1:{r}:accepted", "fence"))
	_, err = NewRedisStore(rdb, WithPrefix("app1:")).Admit(ctx, "r", 2, "o")
	require.ErrorIs(t, err, ErrStaleFence, "one prefix, one record")

	// A brace in the prefix would let ("a", "{b") and ("a{", "b") share
	// the record "a{{b}:accepted", so it is refused.
	_, err = NewRedisStore(rdb, WithPrefix("a{")).Admit(ctx, "b", 5, "o")
	require.ErrorIs(t, err, redlease.ErrInvalidArgument)
}

func TestSetHeaders(t *testing.T) {
	_, rdb := servertest.Mini(t)
	l, err := redlease.New(rdb).TryAcquire(t.Context(), "tenant:42:billing")
	require.NoError(t, err)
	defer l.Release(t.Context())
	h := http.Header{}
	SetHeaders(h, l)
	require.Equal(t, http.Header{
		"Fencing-Token":    {"1"},
		"Fencing-Resource": {"tenant:42:billing"},
		"Fencing-Owner":    {l.Owner()},
	}, h)
	h = http.Header{}
	SetHeaders(h, nil)
	require.Empty(t, h)
	SetHeaders(nil, l) // no panic

	// A permit is fenced on its own: the header names the resource and the
	// permit, which a ResourceOf that returns the bare resource refuses.
	p, err := redlease.New(rdb).TryAcquireSemaphore(t.Context(), "calls", 2)
	require.NoError(t, err)
	defer p.Release(t.Context())
	h = http.Header{}
	SetHeaders(h, p)
	require.Equal(t, "calls#"+strconv.Itoa(p.Permit()), h.Get(HeaderFencingResource))
	require.Equal(t, strconv.FormatInt(p.Fence(), 10), h.Get(HeaderFencingToken))
	require.Equal(t, p.Owner(), h.Get(HeaderFencingOwner))
	byPath := HTTPGuard{Store: &MemoryStore{}, ResourceOf: func(*http.Request) string { return "calls" }}.Wrap(http.NotFoundHandler())
	req := httptest.NewRequest(http.MethodPost, "/calls", nil)
	req.Header = h
	rec := httptest.NewRecorder()
	byPath.ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code, "the pitfall docs/GUARDS.md describes")

	require.Panics(t, func() { HTTPGuard{}.Wrap(http.NotFoundHandler()) })
	require.Panics(t, func() { HTTPGuard{Store: &MemoryStore{}}.Wrap(nil) })
}

// A RedisStore that refuses every Admit for its own configuration is refused
// by Wrap: served, it would answer every request 400 with the server's
// configuration in the body, blaming the clients.
func TestHTTPGuardRefusesMisconfiguredStore(t *testing.T) {
	_, rdb := servertest.Mini(t)
	next := http.NotFoundHandler()
	require.PanicsWithValue(t, "fencing: HTTPGuard.Wrap: unusable Store: redlease: invalid argument: nil Redis client",
		func() { HTTPGuard{Store: NewRedisStore(nil)}.Wrap(next) })
	require.PanicsWithValue(t, `fencing: HTTPGuard.Wrap: unusable Store: redlease: invalid argument: key prefix "a{" holds a '{'`,
		func() { HTTPGuard{Store: NewRedisStore(rdb, WithPrefix("a{"))}.Wrap(next) })
	require.NotPanics(t, func() { HTTPGuard{Store: NewRedisStore(rdb)}.Wrap(next) })
}

// FuzzHTTPGuardHeaders checks that no header values make the guard panic or
// let a malformed token through to the service.
func FuzzHTTPGuardHeaders(f *testing.F) {
	f.Add("5", "o", "r")
	f.Add("", "", "")
	f.Add("-1", "o", "r")
	f.Add("00000000000000000000007", "o", "r")
	f.Add("9223372036854775807", strings.Repeat("o", 300), "r")
	f.Fuzz(func(t *testing.T, fence, owner, resource string) {
		called := false
		h := HTTPGuard{Store: &MemoryStore{}}.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			called = true
		}))
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header = tokenHeaderText(resource, fence, owner)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if called != (rec.Code == http.StatusOK) {
			t.Fatalf("status %d, handler called %v", rec.Code, called)
		}
		if called && (parseFence(fence) <= 0 || owner == "" || resource == "") {
			t.Fatalf("malformed token %q %q %q reached the service", fence, owner, resource)
		}
	})
}
