package wire

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/internal/testtools"
)

func requireTool(t *testing.T, path string) string { return testtools.Require(t, path) }

func sharedDir(t *testing.T) string { return testtools.SharedDir(t) }

// pcapDir is where the test leaves its captures: $SOFTIB_KEEP_PCAP if
// set, so anyone can open them in Wireshark, else a temporary directory.
func pcapDir(t *testing.T) string {
	if d := os.Getenv("SOFTIB_KEEP_PCAP"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// writeCorpus encodes the corpus into an Ethernet capture (RoCEv2 and
// RoCEv1) and an ERF InfiniBand capture, and returns their paths and the
// packets each holds, in order.
func writeCorpus(t *testing.T, dir string) (paths [2]string, packets [2][]encoded) {
	t.Helper()
	var files [2]*os.File
	var writers [2]*PcapWriter
	for i, name := range []string{"softib_roce.pcap", "softib_ib.pcap"} {
		paths[i] = filepath.Join(dir, name)
		f, err := os.Create(paths[i])
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
		if writers[i], err = NewPcapWriter(f, i == 1); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 16384)
	var p, q Packet
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for n, e := range encodedCorpus() {
		if err := Build(buf, &e.h, e.payload, &p); err != nil {
			t.Fatalf("%s: %v", e.label, err)
		}
		frame := p.Frame[:p.Len()]
		i := 0
		parse := ParseEthernet
		if e.h.Encap == EncapIB {
			i, parse = 1, ParseIB
		}
		// What softib sends, softib receives: the same opcode, payload
		// and fields.
		if err := parse(frame, &q); err != nil {
			t.Fatalf("%s: parse of the built packet: %v", e.label, err)
		}
		var back Headers
		q.Headers(&back)
		if back != project(e.h) || !bytes.Equal(q.Payload(), e.payload) {
			t.Fatalf("%s: parsed back differently:\n got %+v\nwant %+v", e.label, back, e.h)
		}
		if err := writers[i].WritePacket(ts.Add(time.Duration(n)*time.Microsecond), frame); err != nil {
			t.Fatal(err)
		}
		packets[i] = append(packets[i], e)
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return paths, packets
}

// TestWiresharkDissectsEncodedCorpus encodes every opcode family in every
// encapsulation and has tshark (Wireshark 4.0 on Debian 12) dissect the
// captures: every frame must be InfiniBand, with our opcode, destination
// QP and PSN, no malformed packet and no warning- or error-level expert
// info.
func TestWiresharkDissectsEncodedCorpus(t *testing.T) {
	tshark := requireTool(t, "tshark")
	paths, packets := writeCorpus(t, pcapDir(t))
	for i, path := range paths {
		frames := tsharkFields(t, tshark, path)
		if len(frames) != len(packets[i]) {
			t.Fatalf("%s: tshark reports %d frames, we wrote %d", path, len(frames), len(packets[i]))
		}
		for n, e := range packets[i] {
			f := frames[n]
			if !strings.Contains(f.protocols, "infiniband") {
				t.Errorf("%s: frame %d not dissected as InfiniBand: %s", e.label, n+1, f.protocols)
				continue
			}
			if dc, why := wiresharkRDasDC(e.h.Opcode); dc && f.malformed {
				// See wiresharkRDasDC: a Wireshark 4.0 bug, not ours;
				// check_pcap's ICRC check still covers these packets.
				t.Logf("%s: frame %d: Wireshark 4.0 calls it malformed: %s", e.label, n+1, why)
				continue
			}
			if f.malformed {
				t.Errorf("%s: frame %d malformed (%s)", e.label, n+1, f.protocols)
			}
			for _, x := range f.experts {
				t.Errorf("%s: frame %d: expert info: %s", e.label, n+1, x)
			}
			if f.opcode != int(e.h.Opcode) {
				t.Errorf("%s: frame %d: tshark decodes opcode %d, we sent %d", e.label, n+1, f.opcode, e.h.Opcode)
			}
			if f.destQP != int(e.h.DestQP) || f.psn != int(e.h.PSN) {
				t.Errorf("%s: frame %d: tshark decodes QPN %#x PSN %#x, we sent %#x %#x",
					e.label, n+1, f.destQP, f.psn, e.h.DestQP, e.h.PSN)
			}
		}
	}
}

// wiresharkRDasDC reports whether Wireshark 4.0 misreads opcode o:
// packet-infiniband.c takes every opcode with bits 7..5 = 010 (RD) for
// Mellanox DC, with a 20-byte BTH, and so reads RDETH and DETH eight bytes
// late and runs off the end of short packets.
func wiresharkRDasDC(o Opcode) (bool, string) {
	if o.Transport() != RD {
		return false, ""
	}
	return true, "it dissects RD (0x40-0x5f) as Mellanox DC with a 20-byte BTH"
}

// TestCheckPcapAcceptsEncodedCorpus runs the independent checker of
// ../shared/tools on the same captures: every ICRC and VCRC right, every
// opcode present, and, apart from the RD frames Wireshark 4.0 misreads,
// a clean Wireshark dissection.
func TestCheckPcapAcceptsEncodedCorpus(t *testing.T) {
	python := requireTool(t, "python3")
	requireTool(t, "tshark")
	checker := requireTool(t, filepath.Join(sharedDir(t), "tools", "check_pcap.py"))
	paths, packets := writeCorpus(t, pcapDir(t))
	var names, rdNames []string
	seen := map[string]bool{}
	for _, ps := range packets {
		for _, e := range ps {
			name := e.h.Opcode.String()
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
				if dc, _ := wiresharkRDasDC(e.h.Opcode); dc {
					rdNames = append(rdNames, name)
				}
			}
		}
	}
	// Everything, CRCs only, every opcode expected.
	run := func(args ...string) (string, error) {
		cmd := exec.Command(python, append([]string{checker, "-q", "--no-scapy"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(append([]string{"--no-tshark", "--expect-opcodes", strings.Join(names, ",")}, paths[:]...)...); err != nil {
		t.Fatalf("check_pcap (CRCs, opcodes): %v\n%s", err, out)
	}
	// The same with tshark, on captures without the RD frames.
	dir := t.TempDir()
	var clean []string
	for i, ps := range packets {
		var keep []encoded
		for _, e := range ps {
			if dc, _ := wiresharkRDasDC(e.h.Opcode); !dc {
				keep = append(keep, e)
			}
		}
		clean = append(clean, writePackets(t, filepath.Join(dir, filepath.Base(paths[i])), i == 1, keep))
	}
	if out, err := run(clean...); err != nil {
		t.Fatalf("check_pcap (tshark): %v\n%s", err, out)
	}
	// The negative control: check_pcap must catch a damaged ICRC and VCRC
	// in our own files, or its verdict above means nothing.
	for _, what := range []string{"icrc", "vcrc"} {
		bad := filepath.Join(dir, "corrupt_"+what+".pcap")
		if out, err := run("--write-corrupted", bad, "--corrupt", what, paths[1]); err != nil {
			t.Fatalf("check_pcap --write-corrupted: %v\n%s", err, out)
		}
		if out, err := run("--no-tshark", bad); err == nil {
			t.Fatalf("check_pcap accepted a capture with damaged %ss:\n%s", what, out)
		}
	}
	t.Logf("check_pcap: %d opcodes, %d of them RD checked for CRCs only", len(names), len(rdNames))
}

func writePackets(t *testing.T, path string, ib bool, ps []encoded) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewPcapWriter(f, ib)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16384)
	var p Packet
	for _, e := range ps {
		if err := Build(buf, &e.h, e.payload, &p); err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(time.Unix(1, 0), p.Frame[:p.Len()]); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

type tsharkFrame struct {
	malformed           bool
	experts             []string
	protocols           string
	opcode, destQP, psn int
}

// tsharkFields dissects a capture and returns, per frame, what the test
// checks. Wireshark's RDMA upper-layer heuristics stay enabled: the corpus
// payloads are chosen not to look like theirs.
func tsharkFields(t *testing.T, tshark, path string) []tsharkFrame {
	t.Helper()
	cmd := exec.Command(tshark, "-n", "-r", path, "-T", "fields",
		"-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|",
		"-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "_ws.expert.message",
		"-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.psn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	var frames []tsharkFrame
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		col := append(strings.Split(sc.Text(), "\t"), make([]string, 7)...)
		f := tsharkFrame{malformed: col[0] != "", protocols: col[3]}
		sev := strings.Split(col[1], "|")
		msg := strings.Split(col[2], "|")
		for k, s := range sev {
			// 0x00400000 warning, 0x00800000 error; notes and chats pass.
			if v, err := strconv.ParseInt(s, 0, 64); err == nil && v >= 0x00400000 {
				m := ""
				if k < len(msg) {
					m = msg[k]
				}
				f.experts = append(f.experts, m)
			}
		}
		f.opcode = firstInt(col[4])
		f.destQP = firstInt(col[5])
		f.psn = firstInt(col[6])
		frames = append(frames, f)
	}
	return frames
}

func firstInt(s string) int {
	s, _, _ = strings.Cut(s, "|")
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return -1
	}
	return int(v)
}
