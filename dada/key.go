package dada

import (
	"fmt"
	"strconv"
	"strings"
)

// Key is a System V IPC key (C key_t, a 32-bit int). A ring at key K keeps
// its data block at K and its header block at K+1.
type Key int32

// DefaultKey is PSRDADA's default key, "dada" (DADA_DEFAULT_BLOCK_KEY).
const DefaultKey Key = 0xdada

// keyIncrement is the step between the keys of one ipcbuf's objects.
const keyIncrement = 0x10000

// ParseKey parses a key the way the psrdada tools do (sscanf "%x"): hex
// digits with an optional 0x prefix, such as "dada" or "0xdada".
func ParseKey(s string) (Key, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0x"), "0X")
	v, err := strconv.ParseUint(t, 16, 32)
	if err != nil || t == "" {
		return 0, fmt.Errorf("%w: cannot parse key %q: want hex digits such as dada or 0xdada", ErrInvalidConfig, s)
	}
	return Key(uint32(v)), nil
}

// String formats the key as ipcs does, e.g. 0x0000dada.
func (k Key) String() string { return fmt.Sprintf("0x%08x", uint32(k)) }

// Short formats the key as the psrdada tools take it, e.g. dada.
func (k Key) Short() string { return fmt.Sprintf("%x", uint32(k)) }

// HeaderKey is the key of the header block of the ring whose data block is k.
func (k Key) HeaderKey() Key { return k + 1 }

// derived returns the key n steps of 0x10000 above k, wrapping as a 32-bit
// int as the C code does.
func (k Key) derived(n int) Key { return Key(int32(uint32(k) + uint32(n)*keyIncrement)) }

// ConnectSemKey is the key of the 2-semaphore connect set of the ipcbuf at k.
func (k Key) ConnectSemKey() Key { return k.derived(1) }

// ReaderSemKey is the key of the 5-semaphore set of reader r (0..7).
func (k Key) ReaderSemKey(r int) Key { return k.derived(2 + r) }

// BlockKey is the key of data segment i of the ipcbuf at k.
func (k Key) BlockKey(i int) Key { return k.derived(MaxReaders + 2 + i) }
