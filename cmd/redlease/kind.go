package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/redlease/redlease"
)

// acquireFunc is one of the Client's acquire calls.
type acquireFunc func(ctx context.Context, resource string, opts ...redlease.WaitOption) (*redlease.Lease, error)

// trying is an acquire call that does not wait as an acquireFunc. It takes
// the options of such a call: WithMaxWait (-wait) is refused with it
// (-nowait) before, and as an invalid argument here.
func trying(acquire func(context.Context, string, ...redlease.LeaseOption) (*redlease.Lease, error)) acquireFunc {
	return func(ctx context.Context, resource string, opts ...redlease.WaitOption) (*redlease.Lease, error) {
		lease := make([]redlease.LeaseOption, len(opts))
		for i, o := range opts {
			var ok bool
			if lease[i], ok = o.(redlease.LeaseOption); !ok && o != nil {
				return nil, fmt.Errorf("%w: a wait option for an acquire that does not wait", redlease.ErrInvalidArgument)
			}
		}
		return acquire(ctx, resource, lease...)
	}
}

// leaseKind is the kind of lease that run takes: the lease of RESOURCE
// (the zero leaseKind), one of the permits of its semaphore (-permits N),
// a read lease (-read) or its write lease (-write). Every kind is a
// *redlease.Lease, renewed, supervised and released alike.
type leaseKind struct {
	semaphore   bool // -permits was given
	permits     int
	read, write bool
}

// addKindFlags defines -permits, -read and -write on fs; kind reads them
// after fs is parsed.
func addKindFlags(fs *flag.FlagSet) (kind func() (leaseKind, error)) {
	permits := fs.Int("permits", 0, "take one of the `N` permits of RESOURCE's semaphore, which N holders may hold at once")
	read := fs.Bool("read", false, "take a read lease of RESOURCE, shared with other readers, never with a writer")
	write := fs.Bool("write", false, "take the write lease of RESOURCE, exclusive of readers and other writers")
	return func() (leaseKind, error) {
		k := leaseKind{permits: *permits, read: *read, write: *write}
		fs.Visit(func(f *flag.Flag) { k.semaphore = k.semaphore || f.Name == "permits" })
		n := 0
		for _, set := range []bool{k.semaphore, k.read, k.write} {
			if set {
				n++
			}
		}
		if n > 1 {
			return leaseKind{}, &usageError{"-permits, -read and -write exclude each other"}
		}
		return k, nil
	}
}

// acquire is k's acquire call, which waits if wait is true.
func (k leaseKind) acquire(c *redlease.Client, wait bool) acquireFunc {
	switch {
	case k.semaphore && wait:
		return func(ctx context.Context, resource string, opts ...redlease.WaitOption) (*redlease.Lease, error) {
			return c.AcquireSemaphore(ctx, resource, k.permits, opts...)
		}
	case k.semaphore:
		return trying(func(ctx context.Context, resource string, opts ...redlease.LeaseOption) (*redlease.Lease, error) {
			return c.TryAcquireSemaphore(ctx, resource, k.permits, opts...)
		})
	case k.read && wait:
		return c.AcquireRead
	case k.read:
		return trying(c.TryAcquireRead)
	case k.write && wait:
		return c.AcquireWrite
	case k.write:
		return trying(c.TryAcquireWrite)
	case wait:
		return c.Acquire
	}
	return trying(c.TryAcquire)
}

// excludedBy reports whether a holder of kind (as in redlease.SharedLease, or
// "lease") keeps a lease of k from being taken.
func (k leaseKind) excludedBy(kind string) bool {
	switch {
	case k.semaphore:
		return kind == "permit"
	case k.read:
		return kind == "write"
	case k.write:
		return kind == "write" || kind == "read"
	}
	return kind == "lease"
}

// flag is the flag that chose k, for messages.
func (k leaseKind) flag() string {
	switch {
	case k.semaphore:
		return "-permits " + strconv.Itoa(k.permits)
	case k.read:
		return "-read"
	case k.write:
		return "-write"
	}
	return "the lease"
}

// of names a lease of k of resource for run's messages, after "the":
// `lease of "r"`, `lease of permit 2 of "r"`, `read lease of "r"`.
func (k leaseKind) of(lease *redlease.Lease, resource string) string {
	switch {
	case k.semaphore && lease != nil:
		return fmt.Sprintf("lease of permit %d of %q", lease.Permit(), resource)
	case k.semaphore:
		return fmt.Sprintf("lease of a permit of %q", resource)
	case k.read:
		return fmt.Sprintf("read lease of %q", resource)
	case k.write:
		return fmt.Sprintf("write lease of %q", resource)
	}
	return fmt.Sprintf("lease of %q", resource)
}

// env is what COMMAND's environment gets for a lease of k.
func (k leaseKind) env(lease *redlease.Lease, resource string) []string {
	env := []string{"REDLEASE_RESOURCE=" + resource, "REDLEASE_FENCE=" + strconv.FormatInt(lease.Fence(), 10),
		"REDLEASE_OWNER=" + lease.Owner(), "REDLEASE_TOKEN=" + lease.Token().String()}
	if k.semaphore {
		env = append(env, "REDLEASE_PERMIT="+strconv.Itoa(lease.Permit()))
	}
	return env
}
