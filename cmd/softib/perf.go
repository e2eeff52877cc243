package main

import (
	"errors"

	"github.com/softib/softib/client"
)

func perfCmd(opts *client.Options, args []string) error {
	return errors.New("perf: not built yet")
}
