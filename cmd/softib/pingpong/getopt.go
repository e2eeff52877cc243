package pingpong

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
)

// ErrUsage marks command-line errors after which the C programs print their
// usage text (Usage) and exit with status 1.
var ErrUsage = errors.New("pingpong: invalid command line")

// The C programs parse their command line with glibc's getopt_long, whose
// syntax the flag package does not share: attached short arguments
// ("-p18515"), clustered short options ("-ec"), options after operands
// ("host -g 0": GNU getopt permutes), and unambiguous prefixes of long
// options ("--it 10"). gnuArgs parses that syntax, taking the option names
// and whether each takes an argument from fs itself (a flag takes none if
// its Value is a bool flag, the flag package's own rule), and rewrites each
// option as "-name" or "-name=value" for fs.Parse, which then does the
// assigning. Single-letter names are getopt's short options, longer ones its
// long options.

// gnuArgs splits args into options rewritten for fs.Parse and operands.
func gnuArgs(fs *flag.FlagSet, args []string) (opts, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(operands, args[i+1:]...), nil

		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			f, err := lookupLong(fs, name)
			if err != nil {
				return nil, nil, err
			}
			switch {
			case isBoolFlag(f) && hasVal:
				return nil, nil, fmt.Errorf("%w: option '--%s' doesn't allow an argument", ErrUsage, f.Name)
			case isBoolFlag(f):
				opts = append(opts, "-"+f.Name)
			default:
				if !hasVal {
					if i+1 == len(args) {
						return nil, nil, fmt.Errorf("%w: option '--%s' requires an argument", ErrUsage, f.Name)
					}
					i++
					val = args[i]
				}
				opts = append(opts, "-"+f.Name+"="+val)
			}

		case len(a) > 1 && a[0] == '-':
			// A cluster of short options; the first one taking an argument
			// takes the rest of the word, or else the next word.
			for j := 1; j < len(a); j++ {
				c := a[j : j+1]
				f := fs.Lookup(c)
				if f == nil {
					return nil, nil, fmt.Errorf("%w: invalid option -- '%s'", ErrUsage, c)
				}
				if isBoolFlag(f) {
					opts = append(opts, "-"+c)
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 == len(args) {
						return nil, nil, fmt.Errorf("%w: option requires an argument -- '%s'", ErrUsage, c)
					}
					i++
					val = args[i]
				}
				opts = append(opts, "-"+c+"="+val)
				break
			}

		default: // an operand; "-" alone is one too
			operands = append(operands, a)
		}
	}
	return opts, operands, nil
}

// lookupLong finds a long option by its name or by an unambiguous prefix of
// it, as getopt_long does.
func lookupLong(fs *flag.FlagSet, name string) (*flag.Flag, error) {
	if f := fs.Lookup(name); f != nil && len(name) > 1 {
		return f, nil
	}
	var matches []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 && name != "" && strings.HasPrefix(f.Name, name) {
			matches = append(matches, f)
		}
	})
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("%w: unrecognized option '--%s'", ErrUsage, name)
	case 1:
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for i, f := range matches {
		names[i] = "'--" + f.Name + "'"
	}
	sort.Strings(names)
	return nil, fmt.Errorf("%w: option '--%s' is ambiguous; possibilities: %s",
		ErrUsage, name, strings.Join(names, " "))
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
