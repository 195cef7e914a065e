package mem

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Compare with errors.Is; the typed errors below wrap them.
var (
	// ErrInvalidated is returned by every access to a region whose provider
	// revoked it (its memory went away). The engine turns it into a local
	// protection error or a remote access NAK. It is a preallocated value, so
	// returning it from the hot path never allocates.
	ErrInvalidated = errors.New("mem: region invalidated by its provider (memory revoked); deregister it and register the memory again")
	// ErrDeregistered is returned by accesses to a region after Deregister.
	ErrDeregistered = errors.New("mem: region deregistered")
	// ErrOutOfBounds reports an access or a registration outside the region or
	// outside the memory a descriptor names.
	ErrOutOfBounds = errors.New("mem: range out of bounds")
	// ErrReadOnly reports a write or atomic on a region registered without
	// write access.
	ErrReadOnly = errors.New("mem: region registered read-only; register with Write: true to write it")
	// ErrMisaligned reports an atomic on an address that is not 8-byte aligned.
	ErrMisaligned = errors.New("mem: atomic operation needs an 8-byte aligned address")
	// ErrZeroLength reports a registration request of length 0.
	ErrZeroLength = errors.New("mem: registration length is 0")
	// ErrNoProvider reports that every provider declined a request; the
	// *ResolveError that wraps it lists each provider's reason.
	ErrNoProvider = errors.New("mem: no memory provider owns the range")
	// ErrSpansProviders reports a request that covers memory of more than one
	// provider (or of one provider and memory it does not own): one region
	// must come from a single provider. Register one region per provider.
	ErrSpansProviders = errors.New("mem: range spans memory of more than one provider; register one region per provider's buffer")
	// ErrRegionTooLarge reports a request above Options.MaxRegionSize.
	ErrRegionTooLarge = errors.New("mem: region larger than the registry's MaxRegionSize")
	// ErrTooManyRegions reports that Options.MaxRegions regions are live.
	ErrTooManyRegions = errors.New("mem: too many registered regions (Options.MaxRegions); deregister some first")
	// ErrDuplicateProvider reports Register of a name already registered.
	ErrDuplicateProvider = errors.New("mem: a provider with this name is already registered")
	// ErrUnknownProvider reports a provider name that is not registered.
	ErrUnknownProvider = errors.New("mem: no provider registered under this name")
	// ErrProviderBusy reports Unregister of a provider that still has live
	// regions; deregister (or invalidate) them first.
	ErrProviderBusy = errors.New("mem: provider still has registered regions")
	// ErrBadView reports a provider whose Map returned a view of the wrong
	// length (a provider bug).
	ErrBadView = errors.New("mem: provider's Map returned a view whose length differs from the request")
	// ErrNotSupported reports a provider or feature this operating system
	// lacks (mmap, SysV shm, memfd and the simulated accelerator are Linux-only).
	ErrNotSupported = errors.New("mem: not supported on this operating system")
	// ErrNoHugePages reports that MAP_HUGETLB failed because no huge pages are
	// reserved. Reserve some (sysctl vm.nr_hugepages=N) or use HugePrefer to
	// fall back to ordinary pages.
	ErrNoHugePages = errors.New("mem: no huge pages available; reserve some with `sysctl vm.nr_hugepages=N` or use HugePrefer to fall back to normal pages")
	// ErrClosed reports use of a provider after Close.
	ErrClosed = errors.New("mem: provider closed")
	// ErrBadAddress reports a device address inside an accelerator's address
	// space that is not part of a live allocation.
	ErrBadAddress = errors.New("mem: address not inside a live allocation")
	// ErrRevoked is the default cause of an invalidation when the provider
	// gives none.
	ErrRevoked = errors.New("mem: memory revoked by its provider")
)

// DeclineReason says why a provider did not take a request.
type DeclineReason uint8

// Decline reasons.
const (
	// NotMine: the range is not in any memory the provider knows.
	NotMine DeclineReason = iota + 1
	// WrongDescriptor: the request carries a descriptor type the provider does not handle.
	WrongDescriptor
	// Partial: the range overlaps the provider's memory but does not lie
	// inside one of its buffers. The registry refuses such a request with
	// ErrSpansProviders, even if a later provider would take it.
	Partial
	// NotSelected: the request named another provider.
	NotSelected
	// Unavailable: the provider is closed or otherwise cannot take requests.
	Unavailable
)

var declineNames = [...]string{
	NotMine:         "not mine",
	WrongDescriptor: "wrong descriptor",
	Partial:         "partial overlap",
	NotSelected:     "not selected",
	Unavailable:     "unavailable",
}

// String returns the reason in words.
func (r DeclineReason) String() string {
	if int(r) < len(declineNames) && declineNames[r] != "" {
		return declineNames[r]
	}
	return fmt.Sprintf("DeclineReason(%d)", uint8(r))
}

// Decline is the error a provider's Acquire returns to say "not mine": the
// registry then asks the next provider. Any other error from Acquire means
// "mine, but it cannot be registered" and ends the resolution.
type Decline struct {
	Provider string        // filled in by the registry
	Reason   DeclineReason // why
	Detail   string        // free text for humans, may be empty
}

// Error implements error.
func (d *Decline) Error() string {
	var b strings.Builder
	b.WriteString("mem: ")
	if d.Provider != "" {
		b.WriteString("provider ")
		b.WriteString(d.Provider)
		b.WriteString(" declined: ")
	} else {
		b.WriteString("declined: ")
	}
	b.WriteString(d.Reason.String())
	if d.Detail != "" {
		b.WriteString(" (")
		b.WriteString(d.Detail)
		b.WriteString(")")
	}
	return b.String()
}

// Declinef builds a *Decline for a provider's Acquire.
func Declinef(reason DeclineReason, format string, args ...any) error {
	return &Decline{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ResolveError reports a request no provider took, or one refused because
// it spans providers. Declines lists every provider asked, in order.
type ResolveError struct {
	Addr, Length uint64
	Declines     []Decline
	Err          error // ErrNoProvider or ErrSpansProviders
}

// Error lists every provider's decline.
func (e *ResolveError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: [%#x, %#x)", e.Err, e.Addr, e.Addr+e.Length)
	if len(e.Declines) == 0 {
		b.WriteString(": no providers registered")
		return b.String()
	}
	for i, d := range e.Declines {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(d.Provider)
		b.WriteString(": ")
		b.WriteString(d.Reason.String())
		if d.Detail != "" {
			b.WriteString(" (")
			b.WriteString(d.Detail)
			b.WriteString(")")
		}
	}
	return b.String()
}

// Unwrap returns ErrNoProvider or ErrSpansProviders.
func (e *ResolveError) Unwrap() error { return e.Err }

// LimitError reports a registration refused by a registry limit.
type LimitError struct {
	Err   error  // ErrRegionTooLarge or ErrTooManyRegions
	Value uint64 // requested size, or live region count
	Max   uint64 // the limit
}

// Error implements error.
func (e *LimitError) Error() string { return fmt.Sprintf("%v (%d > limit %d)", e.Err, e.Value, e.Max) }

// Unwrap returns ErrRegionTooLarge or ErrTooManyRegions.
func (e *LimitError) Unwrap() error { return e.Err }

// ProviderError wraps an error a provider returned from one of its
// callbacks, naming the provider and the step.
type ProviderError struct {
	Provider string
	Op       string // "acquire", "get_pages", "map", ...
	Err      error
}

// Error implements error.
func (e *ProviderError) Error() string {
	return fmt.Sprintf("mem: provider %s: %s: %v", e.Provider, e.Op, e.Err)
}

// Unwrap returns the provider's error.
func (e *ProviderError) Unwrap() error { return e.Err }
