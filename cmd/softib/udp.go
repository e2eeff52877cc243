package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"time"
)

// The kernel's own UDP between the same two hosts, the yardstick for the
// figures softib perf reports across a lab: udp_bw (a blaster: the client
// sends -n datagrams of -s bytes, the server counts what arrives) and
// udp_lat (a ping-pong of -s bytes, half the round trip). Same shape of
// command as the perf tests: the server without a host, the client with.
func udpCmd(test string, args []string) error {
	fs := flag.NewFlagSet("perf "+test, flag.ContinueOnError)
	size := fs.Int("s", 8972, "datagram payload bytes")
	iters := fs.Int("n", 100000, "datagrams (udp_bw) or round trips (udp_lat)")
	port := fs.Int("p", 18516, "UDP port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *size < 8 || *size > 65507 {
		return fmt.Errorf("%s: -s %d (8..65507)", test, *size)
	}
	buf := make([]byte, 65536)
	if fs.NArg() == 0 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{Port: *port})
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadBuffer(8 << 20)
		var got, bytes int
		var first time.Time
		for {
			if !first.IsZero() && test == "udp_bw" {
				c.SetReadDeadline(time.Now().Add(time.Second))
			}
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				return err
			}
			if first.IsZero() {
				first = time.Now()
			}
			if test == "udp_lat" {
				c.WriteToUDP(buf[:n], from)
				if got++; got == *iters {
					return nil
				}
				continue
			}
			if binary.BigEndian.Uint64(buf) == ^uint64(0) { // the end marker
				c.WriteToUDP(buf[:8], from)
				el := time.Since(first)
				fmt.Printf("udp_bw: %d of the datagrams of %d bytes arrived in %v: %.2f Gb/s, %.3f Mpps\n",
					got, *size, el.Round(time.Millisecond), float64(bytes)*8/el.Seconds()/1e9, float64(got)/el.Seconds()/1e6)
				return nil
			}
			got++
			bytes += n
		}
		return nil
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(fs.Arg(0)), Port: *port})
	if err != nil {
		return err
	}
	defer c.Close()
	msg := buf[:*size]
	if test == "udp_lat" {
		rtts := make([]time.Duration, 0, *iters)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for range *iters {
			t0 := time.Now()
			if _, err := c.Write(msg); err != nil {
				return err
			}
			if _, err := c.Read(buf); err != nil {
				return err
			}
			rtts = append(rtts, time.Since(t0))
		}
		sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
		fmt.Printf("udp_lat: %d round trips of %d bytes: half round trip typical %.2f us, min %.2f us, p99 %.2f us\n",
			*iters, *size, rtts[len(rtts)/2].Seconds()*1e6/2, rtts[0].Seconds()*1e6/2, rtts[len(rtts)*99/100].Seconds()*1e6/2)
		return nil
	}
	start := time.Now()
	for i := range *iters {
		binary.BigEndian.PutUint64(msg, uint64(i))
		if _, err := c.Write(msg); err != nil {
			return err
		}
	}
	el := time.Since(start)
	binary.BigEndian.PutUint64(msg, ^uint64(0))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for range 20 { // the end marker may be lost too
		c.Write(msg[:8])
		if _, err := c.Read(buf); err == nil {
			break
		}
	}
	fmt.Printf("udp_bw: sent %d datagrams of %d bytes in %v: %.2f Gb/s offered\n", *iters, *size, el.Round(time.Millisecond),
		float64(*iters)*float64(*size)*8/el.Seconds()/1e9)
	return nil
}
