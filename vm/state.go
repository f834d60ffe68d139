package vm

import "fmt"

// State is where a VM is in its life.
type State string

// The states. Restoring is a restore's own Booting: QEMU runs, the state
// is loading, the vCPUs have not run.
const (
	Created   State = "Created"
	Booting   State = "Booting"
	Restoring State = "Restoring"
	Running   State = "Running"
	Paused    State = "Paused"
	Stopped   State = "Stopped"
)

// transitions lists every legal move; anything else is an error.
var transitions = map[State][]State{
	Created:   {Booting, Restoring, Stopped},
	Booting:   {Running, Stopped},
	Restoring: {Running, Paused, Stopped},
	Running:   {Paused, Stopped},
	Paused:    {Running, Stopped},
	Stopped:   {},
}

// ErrTransition is returned for a move the state machine forbids.
type ErrTransition struct{ From, To State }

func (e *ErrTransition) Error() string {
	return fmt.Sprintf("vm: cannot go from %s to %s", e.From, e.To)
}

// next returns to when from may move there.
func next(from, to State) (State, error) {
	for _, s := range transitions[from] {
		if s == to {
			return to, nil
		}
	}
	return from, &ErrTransition{From: from, To: to}
}
