package servertest

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// A delay is a latency: chunks that arrive while others are held are held
// alongside them, each for the delay after its arrival, in order; not one
// after the other. (Held one after the other, as they were, a client's
// keep-alive PING put off the request behind it by a whole delay: rueidis
// pings every second.)
func TestProxyDelayIsALatency(t *testing.T) {
	srv := Start(t, RedisServer)
	p := StartProxy(t, srv.Addr)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const delay, gap, n = 600 * time.Millisecond, 100 * time.Millisecond, 3
	p.Delay(ToServer, delay)
	start := time.Now()
	for i := range n {
		if _, err := io.WriteString(conn, "ECHO "+string(rune('a'+i))+"\r\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	r := bufio.NewReader(conn)
	for i := range n {
		for _, want := range []string{"$1\r\n", string(rune('a'+i)) + "\r\n"} { // in order
			if line, err := r.ReadString('\n'); err != nil || line != want {
				t.Fatalf("reply %d: %q, %v; want %q", i, line, err, want)
			}
		}
	}
	took := time.Since(start)
	t.Logf("%d requests %v apart, held %v each: replies after %v", n, gap, delay, took)
	// Held one after the other, they took 2·delay: the first chunk, then the
	// others, which had arrived meanwhile, read as one.
	if want := (n-1)*gap + delay; took < want || took >= want+delay/3 {
		t.Fatalf("the last reply came after %v, want about %v", took, want)
	}
}
