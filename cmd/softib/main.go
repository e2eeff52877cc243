// Command softib is softib's command line: what ibv_devinfo, show_gids,
// perftest and the libibverbs pingpongs are for a Linux RDMA stack.
//
//	softib [-socket PATH] [-netns NS] COMMAND [ARGS]
//
// Commands:
//
//	devinfo [-v] [-d DEV]    the devices verbsd hosts (like ibv_devinfo)
//	gids [DEV]               GID tables (like show_gids)
//	stat [-j] [DEV[/PORT]]   port counters (like rdma statistic show link)
//	addr add|del DEV IP      a port's addresses, at run time (like ip addr)
//	pingpong [-T rc|uc|ud]   ibv_rc_pingpong and its siblings, same flags
//	perf TEST                the perftest family: write_bw, read_bw, send_bw,
//	                         atomic_bw, write_lat, read_lat, send_lat
//	lab up|down FILE         a namespace test bed of vHCAs on TAPs
//
// verbsd's socket is -socket, else $SOFTIB_SOCKET, else
// /run/softib/verbsd.sock.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/softib/softib/client"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: softib [-socket PATH] [-netns NS] COMMAND [ARGS]

commands:
  devinfo [-v] [-d DEV]   show devices and ports (like ibv_devinfo)
  gids [DEV]              show GID tables (like show_gids)
  stat [-j] [DEV[/PORT]]  show port counters (like rdma statistic show link)
  addr add|del DEV IP     give a vHCA an address, or take it away
  pingpong [-T rc|uc|ud] [flags] [HOST]
                          ping-pong test, compatible with ibv_rc_pingpong
  perf TEST [flags] [HOST]
                          perftest-compatible benchmark; TEST is one of
                          write_bw read_bw send_bw atomic_bw write_lat
                          read_lat send_lat
  lab up|down FILE        network namespaces with a vHCA each, on one
                          Ethernet segment (see cmd/softib/lab.go)
`)
}

func main() {
	args := os.Args[1:]
	opts := &client.Options{}
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		switch a := args[0]; {
		case (a == "-socket" || a == "--socket") && len(args) > 1:
			opts.Socket = args[1]
			args = args[2:]
		case (a == "-netns" || a == "--netns") && len(args) > 1:
			// Run the command in a network namespace (its TCP exchanges
			// use that namespace's addresses), as ip netns exec does; in
			// a lab's node namespace LAB-NODE, the lab's verbsd.
			if err := inNetns(args[1], opts.Socket, args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "softib:", err)
				os.Exit(1)
			}
			return
		case a == "-h" || a == "--help" || a == "-help":
			usage()
			return
		default:
			fmt.Fprintf(os.Stderr, "softib: unknown option %s\n", a)
			usage()
			os.Exit(2)
		}
	}
	if len(args) == 0 {
		usage()
		os.Exit(2)
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "devinfo":
		err = devinfo(opts, rest)
	case "gids":
		err = gids(opts, rest)
	case "stat":
		err = stat(opts, rest)
	case "pingpong":
		err = pingpongCmd(opts, rest)
	case "perf":
		err = perfCmd(opts, rest)
	case "lab":
		err = labCmd(opts, rest)
	case "addr":
		err = addrCmd(opts, rest)
	case "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "softib: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "softib:", err)
		os.Exit(1)
	}
}

// inNetns runs this command again inside network namespace ns, with the
// lab's socket when ns is a lab node's and no socket was given.
func inNetns(ns, socket string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if socket == "" {
		if lab, _, ok := strings.Cut(ns, "-"); ok {
			if _, err := os.Stat("/run/softib/" + lab + ".sock"); err == nil {
				socket = "/run/softib/" + lab + ".sock"
			}
		}
	}
	cmd := []string{"netns", "exec", ns, self}
	if socket != "" {
		cmd = append(cmd, "-socket", socket)
	}
	c := exec.Command("ip", append(cmd, args...)...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		}
		return err
	}
	return nil
}
