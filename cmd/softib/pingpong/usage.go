package pingpong

import "fmt"

// Usage returns the text each program's usage() prints on stdout, with
// argv0 standing for the program's argv[0]. The text is reproduced byte for
// byte, odd tabs and ud's stale "(default 2048)" included, so that scripts
// reading it see no difference.
func Usage(t Transport, argv0 string) string {
	head := fmt.Sprintf("Usage:\n"+
		"  %s            start a server and wait for connection\n"+
		"  %s <host>     connect to server at <host>\n"+
		"\n"+
		"Options:\n"+
		"  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"+
		"  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"+
		"  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n", argv0, argv0)
	switch t {
	case RC:
		return head + usageRCUC + usageCommonTail +
			"  -o, --odp\t\t    use on demand paging\n" +
			"  -O, --iodp\t\t    use implicit on demand paging\n" +
			"  -P, --prefetch\t    prefetch an ODP MR\n" +
			"  -t, --ts\t            get CQE with timestamp\n" +
			"  -c, --chk\t            validate received buffer\n" +
			"  -j, --dm\t            use device memory\n" +
			"  -N, --new_send            use new post send WR API\n" +
			"  -U, --allow-cc-unprotected  allow allocation of unprotected/shared\n" +
			"                            memory on CoCo guests\n"
	case UC:
		return head + usageRCUC + usageCommonTail + usageChk
	case UD:
		return head +
			"  -s, --size=<size>      size of message to exchange (default 2048)\n" +
			"  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n" +
			"  -n, --iters=<iters>    number of exchanges (default 1000)\n" +
			"  -l, --sl=<SL>          send messages with service level <SL> (default 0)\n" +
			usageCommonTail + usageChk
	}
	return head
}

const (
	usageRCUC = "  -s, --size=<size>      size of message to exchange (default 4096)\n" +
		"  -m, --mtu=<size>       path MTU (default 1024)\n" +
		"  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n" +
		"  -n, --iters=<iters>    number of exchanges (default 1000)\n" +
		"  -l, --sl=<sl>          service level value\n"
	usageCommonTail = "  -e, --events           sleep on CQ events (default poll)\n" +
		"  -g, --gid-idx=<gid index> local port gid index\n"
	usageChk = "  -c, --chk              validate received buffer\n"
)
