package logstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/raftlock/raftlock/internal/snapchain"
)

// A snapshot this store writes itself is a chain (internal/snapchain): a
// base file with the whole table, then delta files, each with what
// changed since the file before it (the caller's Compaction.WriteDelta).
// The snapshot's data is the stream the files make joined, so a big table
// is written whole only once its deltas add up to more than it, and each
// snapshot between costs what changed. Pebble keeps the chain's reference:
//
//	chainRefMagic, uvarint part count, then per part: uvarint index,
//	uvarint name length, name, uvarint size; then uvarint length of the
//	SHA-256 state, the state, the SHA-256 of the stream
//
// The SHA-256 state after the last part lets a delta extend the stream's
// hash without reading the parts again. A snapshot received from the
// leader is one file, whatever it holds (snapRefMagic): nothing is
// appended to it, and the next snapshot of this member is a new base.
const chainRefMagic = "RLSC\x01"

// maxChainBytes bounds a chain's stream, as the transport bounds a
// snapshot a peer announces (16 GiB).
const maxChainBytes = 16 << 30

// part is one file of a chain: the snapshot at index, or the delta to it.
type part struct {
	index uint64
	name  string
	size  uint64
}

// chain is the stored snapshot's files. The zero chain is a snapshot
// kept in pebble (the seed) or none.
type chain struct {
	parts []part
	// own: written by this store as a chain, its data the parts joined;
	// otherwise one file whose bytes are the data.
	own   bool
	state []byte // of the SHA-256 after the last part (own only)
	sum   [sha256.Size]byte
}

func (c chain) empty() bool { return len(c.parts) == 0 }

// last returns the chain's last part; the chain must not be empty.
func (c chain) last() part { return c.parts[len(c.parts)-1] }

// deltaBytes returns the bytes of the chain's deltas.
func (c chain) deltaBytes() uint64 {
	var n uint64
	for _, p := range c.parts[min(1, len(c.parts)):] {
		n += p.size
	}
	return n
}

// has says whether name is one of the chain's files.
func (c chain) has(name string) bool {
	for _, p := range c.parts {
		if p.name == name {
			return true
		}
	}
	return false
}

// ref returns the reference pebble keeps for the chain.
func (c chain) ref() []byte {
	if !c.own {
		return encodeRef(c.parts[0].name, c.sum)
	}
	b := append([]byte(chainRefMagic), binary.AppendUvarint(nil, uint64(len(c.parts)))...)
	for _, p := range c.parts {
		b = binary.AppendUvarint(b, p.index)
		b = binary.AppendUvarint(b, uint64(len(p.name)))
		b = append(b, p.name...)
		b = binary.AppendUvarint(b, p.size)
	}
	b = binary.AppendUvarint(b, uint64(len(c.state)))
	b = append(b, c.state...)
	return append(b, c.sum[:]...)
}

// SnapshotChain returns the number of files the stored snapshot is kept
// in (0: none, its data in pebble) and the bytes of its deltas.
func (s *Disk) SnapshotChain() (parts int, deltaBytes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chain.parts), s.chain.deltaBytes()
}

// isStoredRef says whether stored snapshot data is a reference to files.
func isStoredRef(data []byte) bool {
	return isRef(data) || bytes.HasPrefix(data, []byte(chainRefMagic))
}

// parseRef decodes either kind of reference.
func parseRef(ref []byte) (chain, error) {
	if isRef(ref) {
		name, sum, err := decodeRef(ref)
		if err != nil {
			return chain{}, err
		}
		return chain{parts: []part{{name: name}}, sum: sum}, nil
	}
	if !bytes.HasPrefix(ref, []byte(chainRefMagic)) {
		return chain{}, errors.New("not a snapshot file reference")
	}
	r := refReader{buf: ref[len(chainRefMagic):]}
	c := chain{own: true}
	n := r.uvarint()
	if n == 0 || n > snapchain.MaxParts {
		r.fail()
	}
	var total uint64
	for i := uint64(0); i < n && r.err == nil; i++ {
		p := part{index: r.uvarint(), name: string(r.bytes(255)), size: r.uvarint()}
		if r.err != nil {
			break
		}
		if strings.ContainsAny(p.name, `/\`) || !strings.HasSuffix(p.name, snapSuffix) || c.has(p.name) {
			return chain{}, fmt.Errorf("snapshot chain reference names %q", p.name)
		}
		if i > 0 && p.index <= c.last().index {
			return chain{}, fmt.Errorf("snapshot chain reference: part %d at index %d after %d", i, p.index, c.last().index)
		}
		if total += p.size; total > maxChainBytes || p.size > maxChainBytes {
			return chain{}, fmt.Errorf("snapshot chain reference: parts of more than %d bytes", uint64(maxChainBytes))
		}
		c.parts = append(c.parts, p)
	}
	c.state = bytes.Clone(r.bytes(256))
	if r.err == nil && (len(c.state) == 0 || len(r.buf) != sha256.Size) {
		r.fail()
	}
	if r.err != nil {
		return chain{}, r.err
	}
	copy(c.sum[:], r.buf)
	return c, nil
}

type refReader struct {
	buf []byte
	err error
}

func (r *refReader) fail() {
	if r.err == nil {
		r.err = errors.New("malformed snapshot chain reference")
	}
}

func (r *refReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.buf)
	if k <= 0 {
		r.fail()
		return 0
	}
	r.buf = r.buf[k:]
	return v
}

func (r *refReader) bytes(max uint64) []byte {
	n := r.uvarint()
	if r.err != nil || n > max || n > uint64(len(r.buf)) {
		r.fail()
		return nil
	}
	b := r.buf[:n]
	r.buf = r.buf[n:]
	return b
}

// appendPart writes a new part of the chain prev (a new base when prev is
// empty or not this store's own): the snapshot at index, its bytes
// streamed by produce, paced to rate. It returns the chain with the part;
// nothing refers to the file until the caller stores that chain.
func (f snapFiles) appendPart(ctx context.Context, prev chain, index, seq uint64, rate int64, produce func(io.Writer) error) (chain, error) {
	h := sha256.New()
	next := chain{own: true}
	if prev.own && !prev.empty() {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(prev.state); err != nil {
			return chain{}, fmt.Errorf("%w: %v", errChainHash, err)
		}
		next.parts = append(next.parts, prev.parts...)
	} else {
		h.Write([]byte(snapchain.Magic))
	}
	name := fmt.Sprintf("%020d-%d%s", index, seq, snapSuffix)
	var n countingWriter
	if err := f.writeFile(ctx, name, rate, produce, io.MultiWriter(h, &n)); err != nil {
		return chain{}, err
	}
	h.Write(snapchain.Trailer(uint64(n)))
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		f.remove(name)
		return chain{}, fmt.Errorf("save the snapshot chain's hash: %w", err)
	}
	next.parts = append(next.parts, part{index: index, name: name, size: uint64(n)})
	next.state = state
	copy(next.sum[:], h.Sum(nil))
	return next, nil
}

// errChainHash reports a chain whose saved hash state does not resume: the
// caller writes a new base instead of the delta.
var errChainHash = errors.New("resume the snapshot chain's hash")

type countingWriter int64

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

// readChain returns a chain's data, checked against its SHA-256.
func (f snapFiles) readChain(c chain) ([]byte, error) {
	if !c.own {
		return f.read(c.ref())
	}
	var sizes []uint64
	for _, p := range c.parts {
		sizes = append(sizes, p.size)
	}
	data := make([]byte, 0, snapchain.Size(sizes...))
	data = append(data, snapchain.Magic...)
	for _, p := range c.parts {
		b, err := f.readFile(p.name)
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) != p.size {
			return nil, &SnapshotFileError{Files: snapDir + "/" + p.name, Err: fmt.Errorf("snapshot file %s has %d bytes, its chain says %d", p.name, len(b), p.size)}
		}
		data = append(data, b...)
		data = append(data, snapchain.Trailer(p.size)...)
	}
	if sha256.Sum256(data) != c.sum {
		// The chain has one hash for the whole stream: the damage is in
		// one of its files, which one it cannot say.
		files := snapDir + "/" + c.parts[0].name
		if n := len(c.parts); n > 1 {
			files = fmt.Sprintf("one of %s .. %s (%d files)", files, snapDir+"/"+c.parts[n-1].name, n)
		}
		return nil, &SnapshotFileError{Files: files, Err: fmt.Errorf("snapshot chain of %d files does not match its SHA-256 (%d bytes)", len(c.parts), len(data))}
	}
	return data, nil
}

// openChain opens a chain's data for streaming, with its size. The parts'
// files are opened one at a time as the stream reaches them, so a chain
// of a thousand deltas holds one descriptor; a file removed meanwhile (a
// new base replaced the chain) breaks the stream, and raft sends the new
// snapshot instead.
func (f snapFiles) openChain(c chain) (io.ReadCloser, int64, error) {
	if !c.own {
		file, err := f.fs.Open(f.path(c.parts[0].name))
		if err != nil {
			return nil, 0, fmt.Errorf("open snapshot file: %w", err)
		}
		st, err := file.Stat()
		if err != nil {
			file.Close()
			return nil, 0, fmt.Errorf("stat snapshot file %s: %w", c.parts[0].name, err)
		}
		return file, st.Size(), nil
	}
	// The first file is opened now: a snapshot replaced before it is sent
	// fails here, where raft expects it to.
	first, err := f.fs.Open(f.path(c.parts[0].name))
	if err != nil {
		return nil, 0, fmt.Errorf("open snapshot file: %w", err)
	}
	r := &chainReader{f: f, c: c, first: first, cur: strings.NewReader(snapchain.Magic)}
	var sizes []uint64
	for _, p := range c.parts {
		sizes = append(sizes, p.size)
	}
	return r, int64(snapchain.Size(sizes...)), nil
}

// chainReader reads a chain's stream: the magic, then each part's file
// (its recorded size) and trailer.
type chainReader struct {
	f     snapFiles
	c     chain
	first vfs.File  // the first part's file, opened by openChain
	file  vfs.File  // the part being read's
	next  int       // the part to read after cur
	cur   io.Reader // the magic, or a part's bytes then its trailer
	err   error     // once set, every Read's
}

func (r *chainReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, r.err
	}
	for r.err == nil {
		n, err := r.cur.Read(p)
		switch {
		case n > 0:
			return n, nil
		case err == io.EOF:
			r.err = r.open() // this part is read: on to the next
		case err != nil:
			r.err = err
		default:
			return 0, nil // (0, nil) from below: nothing read, nothing ended
		}
	}
	return 0, r.err
}

// open closes the part read and opens the next one as cur; io.EOF after
// the last.
func (r *chainReader) open() error {
	if r.file != nil {
		r.file.Close()
		r.file = nil
	}
	if r.next == len(r.c.parts) {
		return io.EOF
	}
	p := r.c.parts[r.next]
	file := r.first
	if r.next > 0 {
		var err error
		if file, err = r.f.fs.Open(r.f.path(p.name)); err != nil {
			return fmt.Errorf("open snapshot file: %w", err)
		}
	}
	r.file, r.first = file, nil
	r.cur = io.MultiReader(io.LimitReader(file, int64(p.size)), bytes.NewReader(snapchain.Trailer(p.size)))
	r.next++
	return nil
}

func (r *chainReader) Close() error {
	if r.err == nil {
		r.err = errors.New("snapshot chain reader closed")
	}
	var err error
	for _, f := range []vfs.File{r.first, r.file} {
		if f != nil {
			err = errors.Join(err, f.Close())
		}
	}
	r.first, r.file = nil, nil
	return err
}
