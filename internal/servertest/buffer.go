package servertest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that may be written and read at once: by a
// logger on another goroutine, or by a process's output while the test
// reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
