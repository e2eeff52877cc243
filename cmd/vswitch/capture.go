package main

import (
	"bufio"
	"os"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// capture writes what a switch port receives and sends to a pcap file,
// as ERF InfiniBand records (the InfiniBand link type that Wireshark
// opens; its raw LINKTYPE_INFINIBAND it does not).
type capture struct {
	f  *os.File
	bw *bufio.Writer
	pw *wire.PcapWriter
}

func openCapture(path string) (*capture, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	pw, err := wire.NewPcapWriter(bw, true)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &capture{f: f, bw: bw, pw: pw}, nil
}

func (c *capture) write(pkt []byte) { c.pw.WritePacket(time.Now(), pkt) }

func (c *capture) close() error {
	c.bw.Flush()
	return c.f.Close()
}
