package wire

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// header is what a script's header (its leading comment) says of its call:
// how many keys (per resource, for a script on several), how many
// arguments, and which of them may be absent.
type header struct {
	keys, perResource, args int
	argsPerResource         int          // for a script whose arguments come per key (ARGV[2i-1], ARGV[2i])
	absent                  map[int]bool // ARGV indexes the header says may be absent
	absentKeys              int          // how many trailing KEYS the header says may be absent
}

var (
	keysRef   = regexp.MustCompile(`KEYS\[(\d+)(?:\.\.(\d+))?\]`)
	perRef    = regexp.MustCompile(`KEYS\[4i-3\.\.4i\]`)
	perKeyRef = regexp.MustCompile(`^--\s+KEYS\[i\]`)
	perArgRef = regexp.MustCompile(`^--\s+ARGV\[(\d+)i\]`)
	argvRef   = regexp.MustCompile(`ARGV\[(\d+)\]`)
	argvStart = regexp.MustCompile(`^--\s+ARGV\[(\d+)\]`)
	keysStart = regexp.MustCompile(`^--\s+KEYS\[(\d+)\]`)
)

// readHeader reads lua/name's header.
func readHeader(t *testing.T, name string) header {
	t.Helper()
	src, err := os.ReadFile("lua/" + name)
	if err != nil {
		t.Fatal(err)
	}
	h := header{absent: map[int]bool{}}
	last := 0     // the ARGV whose description the line continues
	lastKey := 0  // the KEYS likewise
	optional := 0 // the first KEYS that may be absent
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "--") || strings.HasPrefix(line, "--#queue") {
			break
		}
		if perRef.MatchString(line) {
			h.perResource = 4
		}
		if perKeyRef.MatchString(line) {
			h.perResource = 1
		}
		if m := perArgRef.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			h.argsPerResource = max(h.argsPerResource, n)
		}
		for _, m := range keysRef.FindAllStringSubmatch(line, -1) {
			n, _ := strconv.Atoi(m[1])
			if m[2] != "" {
				n, _ = strconv.Atoi(m[2])
			}
			h.keys = max(h.keys, n)
		}
		for _, m := range argvRef.FindAllStringSubmatch(line, -1) {
			n, _ := strconv.Atoi(m[1])
			h.args = max(h.args, n)
		}
		if m := argvStart.FindStringSubmatch(line); m != nil {
			last, _ = strconv.Atoi(m[1])
		} else if !strings.HasPrefix(line, "--   ") && !strings.HasPrefix(line, "--\t") {
			last = 0 // the line is not a continuation
		}
		if strings.Contains(line, "absent") && last > 0 {
			h.absent[last] = true
		}
		if m := keysStart.FindStringSubmatch(line); m != nil {
			lastKey, _ = strconv.Atoi(m[1])
		} else if !strings.HasPrefix(line, "--   ") && !strings.HasPrefix(line, "--\t") {
			lastKey = 0
		}
		if strings.Contains(line, "absent") && lastKey > 0 && optional == 0 {
			optional = lastKey
		}
	}
	if optional > 0 {
		h.absentKeys = h.keys - optional + 1
	}
	return h
}

// Every builder sends its script's keys and arguments as the script's
// header lists them: as many keys, and as many arguments, less only trailing
// ones that the header says may be absent.
func TestBuildersMatchTheScriptHeaders(t *testing.T) {
	k := KeysOf("p:", "r")
	sk := SharedKeysOf("p:", "r")
	two := []Keys{KeysOf("p:", "{t}a"), KeysOf("p:", "{t}b")}
	for _, tc := range []struct {
		script string
		calls  []Call // the first sends every argument
	}{
		{"acquire.lua", []Call{Campaign(&k, "o", "o/c", "1000", true, true, true, "h", true),
			Acquire(&k, "o", "o/c", "1000", true, true, true, "h", "25012"),
			Acquire(&k, "o", "o/c", "1000", false, false, false, "", "")}},
		{"acquire_all.lua", []Call{AcquireAll(two, "o", "o/c", "1000", true, true, "h")}},
		{"confirm.lua", []Call{Confirm(&k, "o", 7, "1000")}},
		{"refresh.lua", []Call{RefreshTerm(&k, "o", "1000"), Refresh(k.Lease, "o", "1000")}},
		{"refresh_many.lua", []Call{RefreshMany(len(two), func(i int) (string, string, string) {
			return two[i].Lease, "o", "1000"
		})}},
		{"release.lua", []Call{Release(&k, "o", "o/c", true), Release(&k, "o", "o/c", false), Release(&k, "o", "", false)}},
		{"break.lua", []Call{Break(&k, sk, 0, true, BreakStem("p:"))}},
		{"inspect.lua", []Call{Inspect(&k, sk)}},
		{"advance.lua", []Call{Advance(&k, 5)}},
		{"migrate.lua", []Call{Migrate(Key("p:", "r", KindFence), k.Fence)}},
		{"counter.lua", []Call{Counter(k.Fence)}},
		{"semaphore.lua", []Call{Semaphore(&k, sk, "o", "o/c", "1000", true, true, true, "h", 3, true)}},
		{"semaphore_refresh.lua", []Call{SemaphoreRefresh(&k, sk, "o", "2", "1000")}},
		{"semaphore_release.lua", []Call{SemaphoreRelease(&k, sk, "o", "2", "o/c", true)}},
		{"rw_read.lua", []Call{Read(&k, sk, "o", "o/c", "1000", true, "h")}},
		{"rw_read_refresh.lua", []Call{ReadRefresh(&k, sk, "o", "1000")}},
		{"rw_write_refresh.lua", []Call{WriteRefresh(&k, sk, "o", "1000")}},
		{"rw_read_release.lua", []Call{ReadRelease(&k, sk, "o", "o/c", true)}},
		{"rw_write.lua", []Call{Write(&k, sk, "o", "o/c", "1000", true, true, true, "h")}},
		{"rw_write_release.lua", []Call{WriteRelease(&k, sk, "o", "o/c", true)}},
		{"resume.lua", []Call{Resume(&k, sk, ResumePermit, "o", 7, "1000", 2, 3),
			Resume(&k, sk, ResumeExclusive, "o", 7, "1000", 0, 0)}},
		{"announce.lua", []Call{Announce(&k, true), Announce(&k, false)}},
		{"handover.lua", []Call{Handover(&k, "b", 1000)}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			h := readHeader(t, tc.script)
			wantKeys := h.keys
			if h.perResource > 0 {
				wantKeys = h.perResource * len(two)
			}
			if h.argsPerResource > 0 {
				h.args = h.argsPerResource * len(two)
			}
			if h.keys == 0 && h.perResource == 0 || h.args == 0 && tc.script != "inspect.lua" &&
				tc.script != "counter.lua" && tc.script != "migrate.lua" {
				t.Fatalf("header lists %d keys and %d arguments: not read", h.keys, h.args)
			}
			if Named(tc.script) != tc.calls[0].Script {
				t.Fatalf("the builder runs another script")
			}
			for i, c := range tc.calls {
				if len(c.Keys) > wantKeys || len(c.Keys) < wantKeys-h.absentKeys || i == 0 && len(c.Keys) != wantKeys {
					t.Errorf("call %d sends %d keys, the header lists %d (%d may be absent)", i, len(c.Keys), wantKeys, h.absentKeys)
				}
				if i == 0 && len(c.Args) != h.args {
					t.Errorf("the full call sends %d arguments, the header lists %d", len(c.Args), h.args)
				}
				for n := len(c.Args) + 1; n <= h.args; n++ {
					if !h.absent[n] {
						t.Errorf("call %d leaves out ARGV[%d], which the header does not say may be absent", i, n)
					}
				}
			}
		})
	}
	if len(named) != 23 {
		t.Errorf("%d scripts named, 23 checked", len(named))
	}
}
