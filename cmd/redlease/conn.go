package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
)

// Exit codes; see the usage text.
const (
	exitOK          = 0
	exitFailed      = 1  // break removed nothing; any other failure
	exitUsage       = 2  // bad flags or arguments
	exitUnavailable = 69 // Redis unreachable or refusing (sysexits EX_UNAVAILABLE)
	exitBusy        = 75 // run: lease not acquired (sysexits EX_TEMPFAIL)
	exitLost        = 76 // run: the lease ended while the command ran
	exitCannotExec  = 126
	exitNotFound    = 127
)

// defaultURL is the Redis used when neither -redis nor REDIS_URL is given.
const defaultURL = "redis://127.0.0.1:6379/0"

// pingTimeout bounds the first round trip, which tells an unreachable Redis
// apart from everything else.
const pingTimeout = 5 * time.Second

// conn holds the flags shared by the commands that talk to Redis.
type conn struct {
	url     string
	prefix  string
	verbose bool
}

func addConnFlags(fs *flag.FlagSet) *conn {
	c := &conn{}
	fs.StringVar(&c.url, "redis", "", "Redis `URL`: redis://, rediss://, redis+cluster://, redis+sentinel:// (default $REDIS_URL, else "+defaultURL+")")
	fs.StringVar(&c.prefix, "prefix", redlease.DefaultPrefix, "key `prefix` of the leases")
	fs.BoolVar(&c.verbose, "v", false, "log debug records to stderr")
	return c
}

// session is a connection to Redis and a redlease Client on it.
type session struct {
	rdb    redis.UniversalClient
	locks  *redlease.Client
	prefix string
	where  string
	logger *slog.Logger // nil without -v
}

// session returns a session as the flags say. It does no I/O: go-redis
// dials on the first command. Its error is a usage error (*usageError)
// for a bad URL.
func (c *conn) session(stderr io.Writer) (*session, error) {
	raw := c.url
	if raw == "" {
		raw = os.Getenv("REDIS_URL")
	}
	if raw == "" {
		raw = defaultURL
	}
	rdb, err := newRedis(raw)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("-redis %q: %s", redacted(raw), urlReason(err))}
	}
	s := &session{rdb: rdb, prefix: c.prefix, where: redacted(raw)}
	opts := []redlease.Option{redlease.WithPrefix(c.prefix)}
	if c.verbose {
		s.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opts = append(opts, redlease.WithLogger(s.logger))
		redis.SetLogger(&quietRedisLogger{s.logger})
	}
	s.locks = redlease.New(rdb, opts...)
	return s, nil
}

// connect checks that Redis answers.
func (s *session) connect(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s unreachable: %w", s.where, err)
	}
	s.debug("connected", "redis", s.where)
	return nil
}

// open returns a session for the flags, connected after checkInput passed
// in; see checkInput for its errors.
func (c *conn) open(ctx context.Context, stderr io.Writer, in input) (*session, error) {
	s, err := c.session(stderr)
	if err != nil {
		return nil, err
	}
	if err := s.checkInput(in); err != nil {
		s.close()
		return nil, err
	}
	if err := s.connect(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), redlease.DefaultReleaseTimeout)
	defer cancel()
	_ = s.locks.Close(ctx)
	_ = s.rdb.Close()
}

func (s *session) debug(msg string, args ...any) {
	if s.logger != nil {
		s.logger.Debug(msg, args...)
	}
}

// newRedis returns a client for a Redis URL:
//
//	redis://[user:password@]host:port[/db][?option=value...]      one server
//	rediss://...                                                  the same over TLS
//	redis+cluster://[user:password@]host:port,host:port[?...]     Redis Cluster (seed nodes)
//	redis+sentinel://[user:password@]host:port,host:port[/db]?master_name=NAME
//
// rediss+cluster:// and rediss+sentinel:// use TLS. The query options are
// go-redis's (dial_timeout, read_timeout, ...).
func newRedis(raw string) (redis.UniversalClient, error) {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("not a URL (redis://host:port)")
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("unknown scheme %q", scheme)
	}
	switch kind {
	case "":
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		opt.ContextTimeoutEnabled = true // so that -wait and the release timeout bound requests
		return redis.NewClient(opt), nil
	case "cluster":
		u, err := multiHostURL(raw, base)
		if err != nil {
			return nil, err
		}
		opt, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, err
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opt), nil
	case "sentinel":
		u, err := multiHostURL(raw, base)
		if err != nil {
			return nil, err
		}
		opt, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, err
		}
		if opt.MasterName == "" {
			return nil, errors.New("redis+sentinel:// needs ?master_name=NAME")
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opt), nil
	}
	return nil, fmt.Errorf("unknown scheme %q", scheme)
}

// multiHostURL turns scheme://[userinfo@]h1,h2,h3/path?query into the form
// go-redis parses: base://[userinfo@]h1/path?query&addr=h2&addr=h3.
func multiHostURL(raw, base string) (string, error) {
	_, rest, _ := strings.Cut(raw, "://")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo := ""
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, authority = authority[:i+1], authority[i+1:]
	}
	hosts := strings.Split(authority, ",")
	for _, h := range hosts {
		if h == "" {
			return "", errors.New("empty host in the list")
		}
	}
	u, err := url.Parse(base + "://" + userinfo + hosts[0] + tail)
	if err != nil {
		return "", err
	}
	q := u.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redacted is a URL without its passwords, for messages: the user-info
// password, which URL.Redacted masks, and the value of every query option
// whose name holds "password" (a Sentinel URL carries the master's as
// ?password=; sentinel_password, which go-redis refuses, is masked too in
// case one is given). A URL that net/url cannot parse is masked by hand,
// never shown raw: all up to its last '@' may be user info.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && strings.Contains(raw, "://") { // without "//", user info would be opaque and shown
		u.RawQuery = maskQuery(u.RawQuery)
		return u.Redacted()
	}
	head, rest, ok := strings.Cut(raw, "://")
	if ok {
		head += "://"
	} else {
		head, rest = "", raw
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i+1] + maskQuery(rest[i+1:])
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = "xxxxx" + rest[at:]
	}
	return head + rest
}

// maskQuery masks, in a URL's raw query, the value of each option whose
// name holds "password". The options keep their order, and all else its
// spelling.
func maskQuery(query string) string {
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if hasValue && strings.Contains(strings.ToLower(name), "password") {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + "xxxxx"
		}
	}
	return strings.Join(parts, "&")
}

// urlReason is why newRedis refused a URL, without the URL: net/url's
// errors quote the whole URL, and their reason may quote a part of it (a
// password read as a port: invalid port ":secret"), so the quoted parts go.
func urlReason(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error()
	}
	return "not a valid URL: " + quotedPart.ReplaceAllString(ue.Err.Error(), "")
}

// quotedPart is a %q-quoted string in an error message, and the space
// before it.
var quotedPart = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"`)

// quietRedisLogger keeps go-redis's own log lines (reconnects, pool
// chatter) off stderr; with -v they go to the debug log.
type quietRedisLogger struct{ l *slog.Logger }

func (q *quietRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if q.l != nil {
		q.l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
	}
}
