package vhca

import "github.com/softib/softib/vhca/wire"

// The GID table changes with the addresses of the port's netdev (IBA 1.4
// §14.2.5.x keeps entries where they are; so does Linux's GID cache): an
// entry removed becomes empty (the zero GID) and keeps its index, so that
// QPs using other entries are untouched; an entry added takes the first
// empty slot, or the end. Each change raises EventGIDChange.

// AddGID adds e to port n's GID table and returns its index; adding a
// GID already there returns its index and changes nothing.
func (d *Device) AddGID(n uint8, e GIDEntry) (int, error) {
	p := d.Port(n)
	if p == nil {
		return 0, invalid("no port %d", n)
	}
	if e.GID == (wire.GID{}) {
		return 0, invalid("the zero GID")
	}
	free := -1
	for i, x := range p.GIDs {
		if x == e {
			return i, nil
		}
		if x.GID == (wire.GID{}) && free < 0 {
			free = i
		}
	}
	if free < 0 {
		free = len(p.GIDs)
		p.GIDs = append(p.GIDs, e)
	} else {
		p.GIDs[free] = e
	}
	d.raise(Event{Type: EventGIDChange, Port: n})
	return free, nil
}

// DelGID empties the entries of port n that hold g (of any type) and
// reports how many it emptied.
func (d *Device) DelGID(n uint8, g wire.GID) (int, error) {
	p := d.Port(n)
	if p == nil {
		return 0, invalid("no port %d", n)
	}
	k := 0
	for i, x := range p.GIDs {
		if x.GID == g && g != (wire.GID{}) {
			p.GIDs[i] = GIDEntry{}
			k++
		}
	}
	if k > 0 {
		d.raise(Event{Type: EventGIDChange, Port: n})
	}
	return k, nil
}
