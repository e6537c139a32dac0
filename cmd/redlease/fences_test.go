//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// list -fences shows the fence counters, the legacy per-resource ones
// marked, and migrate-fences folds those in, once.
func TestFenceCounters(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	const prefix = "fc:"
	legacyCounters(t, srv, prefix)

	r := c.run(t, "list", "-prefix", prefix, "-fences")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.Equal(t, []string{"SLOT", "VALUE", "KIND", "KEY"}, strings.Fields(lines[0]))
	kinds := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		kinds[f[2]] = append(kinds[f[2]], f[1]+" "+f[3])
	}
	require.ElementsMatch(t, []string{"41 fc:{old-a}:fence", "7 fc:{old-b}:fence"}, kinds["legacy"])
	require.Len(t, kinds["slot"], 1)
	require.True(t, strings.HasPrefix(kinds["slot"][0], "1 fc:{"), kinds["slot"][0])
	require.Equal(t, "redlease list: 2 legacy per-resource fence counter(s) of an earlier version remain; "+
		"'redlease migrate-fences' folds them into their slots' counters\n", r.stderr)

	r = c.run(t, "list", "-prefix", prefix, "-fences", "-json")
	require.Zero(t, r.code, r.stderr)
	var fcs []fenceJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fcs), r.stdout)
	require.Len(t, fcs, 3)
	for i, fc := range fcs {
		require.Equal(t, fc.Resource != "", fc.Legacy)
		require.Equal(t, fc.Legacy, strings.HasSuffix(fc.Key, ":fence"))
		if i > 0 {
			require.LessOrEqual(t, fcs[i-1].Slot, fc.Slot, "sorted by slot")
		}
	}

}

// migrate-fences folds the legacy counters in, once, and no fence goes back.
func TestMigrateFences(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	const prefix = "fc:"
	legacyCounters(t, srv, prefix)

	r := c.run(t, "migrate-fences", "-prefix", prefix)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "folded 2 per-resource fence counter(s) into their hash slots' counters, and deleted them\n", r.stdout)
	r = c.run(t, "migrate-fences", "-prefix", prefix)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "nothing to fold in")
	r = c.run(t, "-prefix", prefix, "migrate-fences", "-json")
	require.Zero(t, r.code, r.stderr)
	require.JSONEq(t, `{"folded": 0}`, r.stdout)

	r = c.run(t, "list", "-prefix", prefix, "-fences")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stderr, "no legacy counter left")
	require.NotContains(t, r.stdout, "legacy")
	require.Equal(t, 4, strings.Count(r.stdout, "\n"), "one counter per slot: \n%s", r.stdout)
	r = c.run(t, "run", "-prefix", prefix, "old-a", "--", "sh", "-c", `echo "$REDLEASE_FENCE"`)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "42\n", r.stdout, "no fence goes back")

	r = c.run(t, "list", "-fences", "-prefix", "fc-none:")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"), "a header alone: %q", r.stdout)
}

// legacyCounters leaves, under prefix, the per-resource fence counters of
// an earlier version, fc:{old-a}:fence at 41 and fc:{old-b}:fence at 7, and
// a slot's counter at 1 (of resource "new").
func legacyCounters(t *testing.T, srv *servertest.Server, prefix string) {
	t.Helper()
	rdb := srv.Client(t)
	ctx := t.Context()
	require.NoError(t, rdb.Set(ctx, prefix+"{old-a}:fence", 41, 0).Err())
	require.NoError(t, rdb.Set(ctx, prefix+"{old-b}:fence", 7, 0).Err())
	locks := redlease.New(rdb, redlease.WithPrefix(prefix))
	t.Cleanup(func() { _ = locks.Close(context.Background()) })
	l, err := locks.TryAcquire(ctx, "new")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}
