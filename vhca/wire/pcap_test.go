package wire

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestPcapRoundTrip writes frames of both families and reads them back:
// same frames, same times (to the microsecond), and the ERF wrapper
// removed on the way in.
func TestPcapRoundTrip(t *testing.T) {
	for _, ib := range []bool{false, true} {
		var file bytes.Buffer
		w, err := NewPcapWriter(&file, ib)
		if err != nil {
			t.Fatal(err)
		}
		var frames [][]byte
		t0 := time.Date(2026, 11, 29, 1, 2, 3, 456789000, time.UTC)
		buf := make([]byte, 16384)
		var p Packet
		for _, e := range encodedCorpus() {
			if (e.h.Encap == EncapIB) != ib {
				continue
			}
			if err := Build(buf, &e.h, e.payload, &p); err != nil {
				t.Fatal(err)
			}
			f := bytes.Clone(p.Frame[:p.Len()])
			frames = append(frames, f)
			if err := w.WritePacket(t0.Add(time.Duration(len(frames))*time.Millisecond), f); err != nil {
				t.Fatal(err)
			}
		}
		r, err := NewPcapReader(&file)
		if err != nil {
			t.Fatal(err)
		}
		wantLT := uint32(LinkTypeEthernet)
		if ib {
			wantLT = LinkTypeERF
		}
		if r.LinkType() != wantLT {
			t.Fatalf("link type %d, want %d", r.LinkType(), wantLT)
		}
		for i, want := range frames {
			rec, err := r.Next()
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if !bytes.Equal(rec.Data, want) {
				t.Fatalf("record %d differs", i)
			}
			if ib && rec.LinkType != LinkTypeInfiniBand || !ib && rec.LinkType != LinkTypeEthernet {
				t.Fatalf("record %d: link type %d", i, rec.LinkType)
			}
			if wantT := t0.Add(time.Duration(i+1) * time.Millisecond).Truncate(time.Microsecond); !rec.Time.Equal(wantT) {
				t.Fatalf("record %d: time %v, want %v", i, rec.Time, wantT)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("after the last record: %v, want EOF", err)
		}
	}
}

// TestPcapReaderRefusesGarbage: a reader never panics on a damaged file
// and says what is wrong.
func TestPcapReaderRefusesGarbage(t *testing.T) {
	if _, err := NewPcapReader(bytes.NewReader(make([]byte, 24))); err == nil {
		t.Fatal("a file of zeros has no pcap magic, yet it was accepted")
	}
	var file bytes.Buffer
	w, _ := NewPcapWriter(&file, true)
	_ = w.WritePacket(time.Unix(0, 0), make([]byte, 40))
	whole := file.Bytes()
	for n := 24; n < len(whole); n++ {
		r, err := NewPcapReader(bytes.NewReader(whole[:n]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(); err == nil {
			t.Fatalf("a file cut at %d of %d bytes gave a record", n, len(whole))
		}
	}
}
