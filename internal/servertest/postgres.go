package servertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pgDriver is the database/sql driver that Postgres opens connections with;
// the test binary registers it (see Postgres).
const pgDriver = "pgx"

// errNoPostgres means no PostgreSQL binaries were found.
var errNoPostgres = errors.New("PostgreSQL binaries (initdb, postgres) not found")

// pgShared is the PostgreSQL server that the tests of one binary share: it is
// started by the first test that needs it and stopped after the last test.
// Each test gets a database of its own on it.
var pgShared struct {
	once sync.Once
	addr string
	err  error
	dbs  atomic.Int64
}

// Postgres returns a pool of connections to a new, empty database on a
// PostgreSQL server listening on a free loopback port, closed when the test
// ends. Missing binaries skip the test, or fail it when
// REDLEASE_REQUIRE_SERVERS is set.
//
// The pool uses the database/sql driver "pgx", which the test binary must
// register by importing github.com/jackc/pgx/v5/stdlib; servertest does not
// import it, so that the core module does not require pgx. Without it,
// Postgres fails the test before starting a server.
func Postgres(t testing.TB) *sql.DB {
	t.Helper()
	if !slices.Contains(sql.Drivers(), pgDriver) {
		t.Fatalf("servertest.Postgres: no database/sql driver %q registered; "+
			"import _ \"github.com/jackc/pgx/v5/stdlib\" in the test binary", pgDriver)
	}
	pgShared.once.Do(func() { pgShared.addr, pgShared.err = launchPostgres() })
	switch {
	case errors.Is(pgShared.err, errNoPostgres):
		missing(t, pgShared.err.Error())
	case pgShared.err != nil:
		t.Fatalf("PostgreSQL: %v", pgShared.err)
	}
	name := fmt.Sprintf("test_%d", pgShared.dbs.Add(1))
	admin := openPostgres(t, "postgres")
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	_ = admin.Close()
	return openPostgres(t, name)
}

func openPostgres(t testing.TB, dbname string) *sql.DB {
	t.Helper()
	db, err := sql.Open(pgDriver, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", pgShared.addr, dbname))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// postgresBin returns the directory of the newest installed PostgreSQL's
// server binaries (Debian keeps them out of PATH).
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // by major version, numerically
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errNoPostgres
}

// launchPostgres initialises a cluster in a temporary directory and starts
// postgres on a free loopback port, with its unix socket in the same
// directory. initdb and postgres refuse to run as root, so as root they run as
// the postgres user. The server is registered with afterAll to be stopped.
func launchPostgres() (string, error) {
	bin, err := postgresBin()
	if err != nil {
		return "", err
	}
	// Not t.TempDir: the server outlives the test that starts it, and a unix
	// socket path must stay below 108 bytes.
	dir, err := os.MkdirTemp("", "redlease-pg-")
	if err != nil {
		return "", err
	}
	started := false
	defer func() {
		if !started {
			_ = os.RemoveAll(dir)
		}
	}()
	data := filepath.Join(dir, "data")
	attr, err := initPostgres(bin, dir, data)
	if err != nil {
		return "", err
	}
	logPath := filepath.Join(dir, "postgres.log")
	var lastErr error
	for range 5 { // a port picked free may be taken before postgres binds it
		p, err := freePort()
		if err != nil {
			return "", err
		}
		port := strconv.Itoa(p)
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
		if err != nil {
			return "", err
		}
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
			"-c", "listen_addresses=127.0.0.1", "-p", port, "-k", dir,
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
		cmd.Dir, cmd.SysProcAttr, cmd.Stdout, cmd.Stderr = dir, attr, logf, logf
		err = cmd.Start()
		_ = logf.Close()
		if err != nil {
			return "", fmt.Errorf("start postgres: %w", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		addr := net.JoinHostPort("127.0.0.1", port)
		if lastErr = waitPostgres(addr, exited, 30*time.Second); lastErr == nil {
			started = true
			addAfterAll(func() { stopPostgres(cmd, exited); _ = os.RemoveAll(dir) })
			return addr, nil
		}
		stopPostgres(cmd, exited)
	}
	log, _ := os.ReadFile(logPath)
	return "", fmt.Errorf("postgres did not start: %v\n%s", lastErr, log)
}

// initPostgres initialises a cluster in data, below dir, and returns the
// attributes its processes run with.
func initPostgres(bin, dir, data string) (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // do not outlive a test binary that crashes
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		attr.Credential = cred
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.SysProcAttr = dir, attr
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return attr, nil
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// waitPostgres polls addr until PostgreSQL accepts a query, postgres exits, or
// limit passes.
func waitPostgres(addr string, exited <-chan struct{}, limit time.Duration) error {
	db, err := sql.Open(pgDriver, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", addr))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopPostgres asks for a fast shutdown and kills the server if it has not
// stopped within 10 s.
func stopPostgres(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}
