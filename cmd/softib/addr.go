package main

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/softib/softib/client"
)

// addr adds or removes a vHCA port's IP address at run time, as `ip addr`
// does for a netdev (and with it rxe's GID table): softib addr add|del
// DEV IP. The GID table follows; `softib gids` shows it.
func addrCmd(opts *client.Options, args []string) error {
	if len(args) != 3 || (args[0] != "add" && args[0] != "del") {
		return errors.New("addr add|del DEV IP")
	}
	a, err := netip.ParseAddr(args[2])
	if err != nil {
		return err
	}
	ctx, err := client.Open(args[1], opts)
	if err != nil {
		return err
	}
	defer ctx.Close()
	if args[0] == "del" {
		return ctx.DelAddr(1, a)
	}
	i, err := ctx.AddAddr(1, a)
	if err == nil {
		fmt.Printf("%s: %s is GID index %d\n", args[1], a, i)
	}
	return err
}
