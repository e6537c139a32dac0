package valkeylease

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// This package is rueidislease for valkey-go: its driver and its tests
// are rueidislease's with the names changed. A change to one that is not
// made to the other fails here (in a checkout of the repository, where
// ../rueidislease is).
func TestSameAsRueidislease(t *testing.T) {
	rename := strings.NewReplacer(
		"github.com/redis/rueidis", "github.com/valkey-io/valkey-go",
		"rueidis.RedisError", "valkey.ValkeyError",
		"rueidis.RedisResult", "valkey.ValkeyResult",
		"rueidis.RedisMessage", "valkey.ValkeyMessage",
		"NonRedisError", "NonValkeyError",
		"*RedisError", "*ValkeyError",
		"rueidislease", "valkeylease",
		"rueidis.", "valkey.",
		"rueidis's", "valkey-go's",
	)
	word := regexp.MustCompile(`\brueidis\b`)
	for _, f := range []string{"driver.go", "subscribe.go", "driver_test.go", "lease_test.go", "helpers_test.go"} {
		theirs, err := os.ReadFile(filepath.Join("..", "rueidislease", f))
		if os.IsNotExist(err) {
			t.Skip("no ../rueidislease: not a checkout of the repository")
		}
		if err != nil {
			t.Fatal(err)
		}
		ours, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want := word.ReplaceAllString(rename.Replace(string(theirs)), "valkey-go")
		if got := string(ours); got != want {
			t.Errorf("%s differs from ../rueidislease/%s with the names changed", f, f)
			for i, l := range strings.Split(got, "\n") {
				if w := strings.Split(want, "\n"); i >= len(w) || w[i] != l {
					t.Logf("first difference, line %d:\n ours:   %s", i+1, l)
					if i < len(w) {
						t.Logf(" theirs: %s", w[i])
					}
					break
				}
			}
		}
	}
}
