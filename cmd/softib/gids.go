package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/softib/softib/client"
	"github.com/softib/softib/vhca"
)

// gids prints the GID tables as show_gids does: device, port, index,
// GID, its IPv4 address when it has one, RoCE version, netdev.
func gids(opts *client.Options, args []string) error {
	list, err := client.Devices(opts)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 1, '\t', 0)
	fmt.Fprintln(w, "DEV\tPORT\tINDEX\tGID\tIPv4\tVER\tDEV")
	fmt.Fprintln(w, "---\t----\t-----\t---\t------------\t---\t---")
	n := 0
	for _, d := range list {
		if len(args) > 0 && d.Name != args[0] {
			continue
		}
		ctx, err := client.Open(d.Name, opts)
		if err != nil {
			return err
		}
		for port := 1; port <= ctx.Ports; port++ {
			p, err := ctx.QueryPort(port)
			if err != nil {
				ctx.Close()
				return err
			}
			for i := range p.GIDTblLen {
				g, err := ctx.QueryGID(port, i)
				if err != nil {
					ctx.Close()
					return err
				}
				ip := netip.AddrFrom16(g.GID)
				v4 := ""
				if ip.Is4In6() {
					v4 = ip.Unmap().String()
				}
				ver := "v2"
				switch g.Type {
				case vhca.GIDTypeRoCEv1:
					ver = "v1"
				case vhca.GIDTypeIB:
					ver = "IB"
				}
				netdev := p.Netdev
				if netdev == "" {
					netdev = "-" // loopback or in-memory ports have none
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", d.Name, port, i, longGID(g.GID), v4, ver, netdev)
				n++
			}
		}
		ctx.Close()
	}
	w.Flush()
	fmt.Printf("n_gids_found=%d\n", n)
	return nil
}

// longGID writes all eight groups, zeros included, as show_gids does.
func longGID(g [16]byte) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}
