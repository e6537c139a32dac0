package redlease

import (
	"context"
	_ "embed"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts are loaded into Redis on first use and then run by EVALSHA,
// falling back to EVAL when the server answers NOSCRIPT (after a restart or
// SCRIPT FLUSH). Each script's header states its keys, arguments and reply.
var (
	//go:embed queue.lua
	queueSrc string

	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = newScript(withQueue(acquireSrc))

	//go:embed acquire_all.lua
	acquireAllSrc    string
	acquireAllScript = newScript(withQueue(acquireAllSrc))

	//go:embed confirm.lua
	confirmSrc    string
	confirmScript = newScript(confirmSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = newScript(refreshSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = newScript(withQueue(releaseSrc))

	//go:embed break.lua
	breakSrc    string
	breakScript = newScript(withQueue(breakSrc))

	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = newScript(inspectSrc)

	//go:embed leader.lua
	leaderSrc    string
	leaderScript = newScript(leaderSrc)
)

// withQueue returns src with queue.lua's functions inserted at its line
// '--#queue'. They come after a script's common case rather than before it,
// because defining them costs time on every call.
func withQueue(src string) string {
	const marker = "\n--#queue\n"
	before, after, ok := strings.Cut(src, marker)
	if !ok {
		panic("redlease: script without " + marker)
	}
	return before + "\n" + queueSrc + after
}

// script is a redis.Script that the hot paths can also run with a command
// they build themselves. redis.Script.Run copies the keys and arguments into
// a new slice and boxes every key; the acquire, renew and release paths
// instead pass one slice, with the keys as pointers to strings they already
// hold, which go-redis writes without boxing (see run).
type script struct {
	*redis.Script
	hash, src any // EVALSHA's and EVAL's second argument, boxed once
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, hash: s.Hash(), src: src}
}

// processor sends one command: a client, or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// scriptCmd is the command that reads a script's reply.
type scriptCmd interface {
	redis.Cmder
	SetFirstKeyPos(int8)
}

// intReply reads an integer reply without boxing it; sliceReply reads any
// reply.
func intReply(ctx context.Context, args ...any) scriptCmd   { return redis.NewIntCmd(ctx, args...) }
func sliceReply(ctx context.Context, args ...any) scriptCmd { return redis.NewCmd(ctx, args...) }

// command returns the script's command: args are the whole command with two
// free places first, then the number of keys, the keys and the arguments
// (strings may be passed as *string, which boxes without allocating, as
// &lease.owner does). command fills the free places with EVALSHA and the
// hash or, with source, with EVAL and the script itself. newCmd makes the
// command that reads the reply.
func (s *script) command(ctx context.Context, args []any, source bool, newCmd func(context.Context, ...any) scriptCmd) scriptCmd {
	if source {
		args[0], args[1] = "eval", s.src
	} else {
		args[0], args[1] = "evalsha", s.hash
	}
	cmd := newCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // for Cluster routing
	return cmd
}

// run runs the script as go-redis's Script.Run does: EVALSHA, and EVAL when
// the server does not have the script. args and newCmd are command's.
func (s *script) run(ctx context.Context, p processor, args []any, newCmd func(context.Context, ...any) scriptCmd) scriptCmd {
	cmd := s.command(ctx, args, false, newCmd)
	// HasErrorPrefix allocates, even for nil: ask it only about errors.
	if err := p.Process(ctx, cmd); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A copy: the first command keeps its own arguments.
		cmd = s.command(ctx, slices.Clone(args), true, newCmd)
		_ = p.Process(ctx, cmd)
	}
	return cmd
}

// runAll runs the script n times, the i-th time with command args(i) (see
// command; args makes a new slice on every call), in pipelines of at most
// maxBatch commands, each sent as EVALSHA and sent again as EVAL to a server
// that does not have the script. On Redis Cluster, go-redis splits each
// pipeline by node. Every command gets an answer or an error of its own.
func (s *script) runAll(ctx context.Context, rdb redis.UniversalClient, n int, args func(i int) []any,
	newCmd func(context.Context, ...any) scriptCmd) []scriptCmd {
	cmds := make([]scriptCmd, n)
	if n == 1 {
		cmds[0] = s.run(ctx, rdb, args(0), newCmd)
		return cmds
	}
	for from := 0; from < n; from += maxBatch {
		batch := cmds[from:min(from+maxBatch, n)]
		pipe := rdb.Pipeline()
		for i := range batch {
			batch[i] = s.command(ctx, args(from+i), false, newCmd)
			_ = pipe.Process(ctx, batch[i])
		}
		_, _ = pipe.Exec(ctx)
		var retry []int
		for i, cmd := range batch {
			if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				retry = append(retry, i)
			}
		}
		if len(retry) == 0 {
			continue
		}
		// The server lost its script cache: send the source.
		pipe = rdb.Pipeline()
		for _, i := range retry {
			batch[i] = s.command(ctx, args(from+i), true, newCmd)
			_ = pipe.Process(ctx, batch[i])
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

// isOne reads an integer reply that is 1 for success: the refresh and
// confirm scripts'.
func isOne(cmd scriptCmd) (bool, error) {
	n, err := cmd.(*redis.IntCmd).Result()
	return err == nil && n == 1, err
}
