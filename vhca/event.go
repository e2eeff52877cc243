package vhca

// EventType is an asynchronous event's kind (ibv_event_type), plus the
// completion notification of an armed CQ.
type EventType uint8

const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
	EventCompletion       EventType = 255 // an armed CQ got a completion (ibv_get_cq_event)
)

// Event is an asynchronous event or a completion notification. The object
// it concerns is set, the others are nil.
type Event struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}

func (d *Device) raise(e Event) { d.events = append(d.events, e) }

// Events moves the pending events into buf and returns how many it moved.
func (d *Device) Events(buf []Event) int {
	if len(d.events) == 0 {
		return 0 // polled every round: no store back
	}
	n := copy(buf, d.events)
	d.events = d.events[:copy(d.events, d.events[n:])]
	return n
}
