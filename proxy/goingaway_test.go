package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
)

// wsFrame is one server frame (FIN, text) with n payload bytes, masked when mask is set.
func wsFrame(n int, mask bool) []byte {
	b := []byte{0x81}
	var m byte
	if mask {
		m = 0x80
	}
	switch {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask {
		b = append(b, 1, 2, 3, 4)
	}
	return append(b, bytes.Repeat([]byte{'x'}, n)...)
}

// TestWSFramesBoundaries_O3: fed a stream of frames in any chunking, the frame follower stops
// exactly at each frame's start, whatever the length's encoding (7, 16 or 64 bits) or a mask.
func TestWSFramesBoundaries_O3(t *testing.T) {
	var stream []byte
	var starts []int
	for _, f := range [][]byte{wsFrame(0, false), wsFrame(5, false), wsFrame(125, false), wsFrame(126, false),
		wsFrame(300, true), wsFrame(70000, false), wsFrame(1, true)} {
		starts = append(starts, len(stream))
		stream = append(stream, f...)
	}
	for _, chunk := range []int{1, 2, 3, 7, 100, 4096, len(stream)} {
		var f wsFrames
		var got []int
		pos := 0
		for pos < len(stream) {
			end := min(pos+chunk, len(stream))
			p := stream[pos:end]
			for len(p) > 0 {
				k := f.advance(p, true)
				if k < 0 {
					pos += len(p)
					break
				}
				got = append(got, pos+k)
				// Step over the boundary: follow one byte past it.
				if k == len(p) {
					pos += k
					break
				}
				f.advance(p[k:k+1], false)
				pos += k + 1
				p = p[k+1:]
			}
		}
		if !f.atBoundary() {
			t.Errorf("chunk %d: not at a boundary after whole frames", chunk)
		}
		// Every boundary seen is a frame start (or the end); every frame start is seen.
		want := map[int]bool{len(stream): true}
		for _, s := range starts {
			want[s] = true
		}
		seen := map[int]bool{}
		for _, g := range got {
			if !want[g] {
				t.Fatalf("chunk %d: boundary at %d, not a frame start (%v)", chunk, g, starts)
			}
			seen[g] = true
		}
		for _, s := range starts {
			if !seen[s] {
				t.Errorf("chunk %d: frame start %d not seen", chunk, s)
			}
		}
	}
}

// FuzzWSFrames: following any bytes in two pieces leaves the follower where following them at
// once does, and a boundary it reports is one: what comes before it leaves the follower at one.
func FuzzWSFrames(f *testing.F) {
	f.Add(append(wsFrame(3, false), wsFrame(200, true)...), 4)
	f.Add(wsFrame(70000, false)[:20], 9)
	f.Add([]byte{0x88, 0x02, 0x03, 0xe9}, 1)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if cut < 0 || cut > len(b) {
			return
		}
		var whole, parts wsFrames
		whole.advance(b, false)
		parts.advance(b[:cut], false)
		parts.advance(b[cut:], false)
		if whole != parts {
			t.Fatalf("in two pieces %+v, at once %+v", parts, whole)
		}
		var s wsFrames
		k := s.advance(b, true)
		if k >= 0 {
			var check wsFrames
			check.advance(b[:k], false)
			if !check.atBoundary() {
				t.Fatalf("boundary at %d is not one", k)
			}
		}
	})
}

// TestGoingAwayBetweenFrames_O3: a WebSocket told to go away in the middle of one of the
// console's frames gets that frame whole, then the close frame 1001, and nothing after.
func TestGoingAwayBetweenFrames_O3(t *testing.T) {
	callerEnd, fleetEnd := net.Pipe()
	consoleEnd, consoleFar := net.Pipe()
	defer consoleFar.Close()
	var live liveConns
	tun := live.add("alpha", "alice@example.com", fleetEnd, consoleEnd)
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(callerEnd)
		got <- b
	}()
	w := frameWriter{Conn: fleetEnd, t: tun}
	first, second := wsFrame(10, false), wsFrame(4, false)
	if _, err := w.Write(first[:5]); err != nil { // half of the first frame
		t.Fatal(err)
	}
	tun.goAway() // mid-frame: the close frame waits for the boundary
	_, err := w.Write(append(first[5:], second...))
	if !errors.Is(err, errGoneAway) {
		t.Fatalf("write after goAway: %v, want errGoneAway", err)
	}
	tun.close()
	want := append(append([]byte{}, first...), wsGoingAway...)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the caller got %x\nwant %x", b, want)
	}

	// At a boundary already: the close frame goes at once, and the tunnel closes.
	callerEnd2, fleetEnd2 := net.Pipe()
	consoleEnd2, consoleFar2 := net.Pipe()
	defer consoleFar2.Close()
	tun2 := live.add("alpha", "alice@example.com", fleetEnd2, consoleEnd2)
	go func() {
		b, _ := io.ReadAll(callerEnd2)
		got <- b
	}()
	w2 := frameWriter{Conn: fleetEnd2, t: tun2}
	if _, err := w2.Write(second); err != nil {
		t.Fatal(err)
	}
	tun2.goAway()
	want = append(append([]byte{}, second...), wsGoingAway...)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the caller got %x\nwant %x", b, want)
	}
}
