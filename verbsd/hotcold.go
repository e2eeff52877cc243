package verbsd

// What a round looks at of the clients' rings (the next entry of every
// send ring; every lookEvery rounds, every CQ's arm word) costs a message
// a load per ring, idle or not: with many idle clients, most of the
// round. So each list keeps its hot items first. An item idle for
// coldAfter rounds (a few milliseconds) turns cold, and is looked at only
// every coldEvery times, until it has work again. Idle clients then cost
// a message an eighth of what they did, and the first message after such
// a wait waits a few rounds more (a round with nothing to do is some
// 25 ns), an armed CQ's event a few microseconds at most.
const (
	coldAfter = 1 << 16
	coldEvery = 8
)

// hotFirst orders a list whose hot items come first: list[:hot]. It moves
// items only through swap, which swaps them in the list and in whatever
// its owner keeps in step with it.
type hotFirst struct{ hot int }

// added makes hot the item just appended at last.
func (p *hotFirst) added(last int, swap func(i, j int)) {
	swap(p.hot, last)
	p.hot++
}

// removed moves item i to last, the hot ones staying first; the owner
// then drops last.
func (p *hotFirst) removed(i, last int, swap func(i, j int)) {
	if i < p.hot {
		p.hot--
		swap(i, p.hot)
		i = p.hot
	}
	swap(i, last)
}

// warm makes the cold item i hot; cool makes the hot item i cold. Each
// moves the item at the edge between the two into i.
func (p *hotFirst) warm(i int, swap func(i, j int)) {
	swap(i, p.hot)
	p.hot++
}

func (p *hotFirst) cool(i int, swap func(i, j int)) {
	p.hot--
	swap(i, p.hot)
}
