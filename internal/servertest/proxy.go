package servertest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that injects network faults between
// a client and a server: per-direction latency, blackhole (connections stay
// open, nothing is forwarded until healed, as TCP would hold and retransmit),
// dropped replies (the request is delivered, then the connection is closed
// instead of delivering the reply) and reset of every open connection.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	faults  [2]faults // by direction
	conns   map[net.Conn]struct{}
	closed  bool
	done    chan struct{} // closed by Close: ends the waits of held chunks
	pumping sync.WaitGroup
}

// Direction of traffic through the proxy.
type Direction int

const (
	ToServer Direction = iota // requests
	ToClient                  // replies
)

type faults struct {
	delay     time.Duration
	blackhole bool
	drop      int // close the connection instead of forwarding, this many times
}

// StartProxy starts a proxy to target on a free loopback port; it is closed
// when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.pumping.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Delay holds every chunk going in direction d for delay after it arrived
// before forwarding it, in order: a latency, as of a long link, not a
// narrow one (chunks that arrive while others are held are held alongside
// them, not after them: a keep-alive PING does not put off the request
// behind it by another delay). Chunks already held keep their time.
func (p *Proxy) Delay(d Direction, delay time.Duration) {
	p.set(func() { p.faults[d].delay = delay })
}

// Blackhole stops forwarding in both directions without closing anything.
func (p *Proxy) Blackhole() {
	p.set(func() { p.faults[ToServer].blackhole, p.faults[ToClient].blackhole = true, true })
}

// DropReplies makes the proxy close a connection, instead of forwarding,
// when one of the next n replies arrives on it: the request was delivered,
// its reply is lost. (A new connection's handshake replies count too, so warm
// the client's connections first.) Pub/sub traffic (a subscription's
// confirmation, an unsubscribe's reply, a message) is no reply here: it
// passes and does not count, since a Client subscribes and unsubscribes on
// its own, whenever its leases and waiters come and go.
func (p *Proxy) DropReplies(n int) {
	p.set(func() { p.faults[ToClient].drop = n })
}

// Heal ends every fault; held traffic flows again.
func (p *Proxy) Heal() {
	p.set(func() { p.faults = [2]faults{} })
}

// Reset closes every open connection abruptly (RST).
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	_ = p.ln.Close()
	p.Reset()
	p.pumping.Wait()
}

func (p *Proxy) accept() {
	defer p.pumping.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.pumping.Add(2)
		p.mu.Unlock()
		go p.pump(client, server, ToServer)
		go p.pump(server, client, ToClient)
	}
}

// pump copies src to dst, applying the faults of direction d to each chunk.
// Chunks go to a writer of the pump's (forward), which sends each at its
// time, in order, while the pump reads on. When src ends by EOF, what is
// held is still delivered; when the proxy drops, resets or closes the
// connection, it is lost with it.
func (p *Proxy) pump(src, dst net.Conn, d Direction) {
	defer p.pumping.Done()
	held := make(chan heldChunk, 1024)
	abort := make(chan struct{})
	forwarded := make(chan struct{})
	go p.forward(dst, held, abort, forwarded)
	var err error
	defer func() {
		if !errors.Is(err, io.EOF) {
			close(abort)
		}
		close(held)
		<-forwarded
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		var n int
		n, err = src.Read(buf)
		if n > 0 {
			arrived := time.Now()
			p.mu.Lock()
			for p.faults[d].blackhole && !p.closed {
				p.cond.Wait()
			}
			f, closed := p.faults[d], p.closed
			if f.drop > 0 && isPubSub(buf[:n]) {
				f.drop = 0
			} else if f.drop > 0 {
				p.faults[d].drop--
			}
			p.mu.Unlock()
			if closed || f.drop > 0 {
				err = net.ErrClosed
				return
			}
			held <- heldChunk{data: append([]byte(nil), buf[:n]...), due: arrived.Add(f.delay)}
		}
		if err != nil {
			return
		}
	}
}

// heldChunk is a chunk that forward sends to its destination at due.
type heldChunk struct {
	data []byte
	due  time.Time
}

// forward writes the chunks of held to dst, each at its due time, until
// held is closed, abort is closed or a write fails (then it drops the
// rest); it closes forwarded when it returns.
func (p *Proxy) forward(dst net.Conn, held <-chan heldChunk, abort <-chan struct{}, forwarded chan<- struct{}) {
	defer close(forwarded)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failed := false
	for c := range held {
		if failed {
			continue
		}
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-abort:
				failed = true
				continue
			case <-p.done:
				failed = true
				continue
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			failed = true
		}
	}
}

// pubSubKinds are the first words of the pub/sub replies and messages.
var pubSubKinds = []string{"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "psubscribe", "punsubscribe",
	"message", "smessage", "pmessage", "pong"}

// isPubSub reports whether a chunk from the server is pub/sub traffic: a
// RESP3 push, or a RESP2 array whose first element names a pub/sub kind.
func isPubSub(chunk []byte) bool {
	if len(chunk) > 0 && chunk[0] == '>' {
		return true
	}
	if len(chunk) == 0 || chunk[0] != '*' {
		return false
	}
	_, rest, ok := bytes.Cut(chunk, []byte("\r\n")) // *<n>
	if !ok || len(rest) == 0 || rest[0] != '$' {
		return false
	}
	_, rest, ok = bytes.Cut(rest, []byte("\r\n")) // $<len>
	if !ok {
		return false
	}
	for _, k := range pubSubKinds {
		if bytes.HasPrefix(rest, []byte(k+"\r\n")) {
			return true
		}
	}
	return false
}
