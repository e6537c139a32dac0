// Package embedded starts the embedded Redis (miniredis) that the demo of
// cmd/redlease and the test kit redleasetest run on.
package embedded

import (
	"crypto/fips140"

	"github.com/alicebob/miniredis/v2"
)

// Start starts mr. miniredis names scripts by their SHA-1, as Redis does,
// on the goroutines that serve its connections: a Redis server's work,
// which a real one does in a process of its own, outside this one's FIPS
// 140 boundary. Under GODEBUG=fips140=only, where crypto/sha1 panics, mr
// and the goroutines it starts therefore run without strict enforcement;
// the rest of the process, redlease's calls included, keeps it.
func Start(mr *miniredis.Miniredis) error { return serve(mr.Start) }

// Restart starts mr again after its Close, as Start does.
func Restart(mr *miniredis.Miniredis) error { return serve(mr.Restart) }

// serve runs start, whose goroutines inherit the exemption.
func serve(start func() error) error {
	var err error
	fips140.WithoutEnforcement(func() { err = start() })
	return err
}
