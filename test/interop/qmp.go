package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// qmpSocket is qemu's QMP socket in the VM's directory.
const qmpSocket = "qmp.sock"

// VirtqueueStatus is qemu's side of one virtio-net queue
// (x-query-virtio-queue-status): how far the device has taken descriptors
// (LastAvail) and returned them (Used), and what it has read of the
// guest's available index (ShadowAvail).
type VirtqueueStatus struct {
	Kind         string // rx0, tx0, rx1, ..., control
	Pair         int    // the queue pair; -1 for the control queue
	Path         string // the device's QOM path
	Index        int    `json:"queue-index"`
	Inuse        int
	LastAvail    int `json:"last-avail-idx"`
	ShadowAvail  int `json:"shadow-avail-idx"`
	Used         int `json:"used-idx"`
	SignalledUse int `json:"signalled-used"`
}

func (q VirtqueueStatus) String() string {
	return fmt.Sprintf("%s %s: last-avail-idx %d shadow-avail-idx %d used-idx %d signalled-used %d inuse %d",
		q.Path, q.Kind, q.LastAvail, q.ShadowAvail, q.Used, q.SignalledUse, q.Inuse)
}

// VirtioQueues reports qemu's side of the guest's virtio-net queues, one
// line per queue (VirtqueueStatus). A queue whose guest keeps posting and
// kicking while qemu's indices stand still is stalled in the device, not
// in the guest; the guest's own counters (ethtool -S) tell the other half.
func (vm *VM) VirtioQueues(ctx context.Context) (string, error) {
	qs, err := vm.VirtqueueStatus(ctx)
	var b strings.Builder
	for _, q := range qs {
		fmt.Fprintln(&b, q)
	}
	return b.String(), err
}

// VirtqueueStatus asks qemu, over QMP, for the state of every queue of
// the guest's virtio-net devices.
func (vm *VM) VirtqueueStatus(ctx context.Context) ([]VirtqueueStatus, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(vm.dir, qmpSocket))
	if err != nil {
		return nil, fmt.Errorf("interop: qmp: %w", err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // the greeting
		return nil, fmt.Errorf("interop: qmp greeting: %w", err)
	}
	call := func(cmd string, args any, reply any) error {
		req, err := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
		if err != nil {
			return err
		}
		if _, err := c.Write(append(req, '\n')); err != nil {
			return fmt.Errorf("interop: qmp %s: %w", cmd, err)
		}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return fmt.Errorf("interop: qmp %s: %w", cmd, err)
			}
			var resp struct {
				Event  string
				Return json.RawMessage
				Error  *struct{ Desc string }
			}
			if err := json.Unmarshal([]byte(line), &resp); err != nil {
				return fmt.Errorf("interop: qmp %s: %w: %s", cmd, err, line)
			}
			switch {
			case resp.Event != "":
				continue
			case resp.Error != nil:
				return fmt.Errorf("interop: qmp %s: %s", cmd, resp.Error.Desc)
			case reply == nil:
				return nil
			}
			return json.Unmarshal(resp.Return, reply)
		}
	}
	if err := call("qmp_capabilities", map[string]any{}, nil); err != nil {
		return nil, err
	}
	var devs []struct{ Path, Name string }
	if err := call("x-query-virtio", map[string]any{}, &devs); err != nil {
		return nil, err
	}
	var out []VirtqueueStatus
	for _, dev := range devs {
		if dev.Name != "virtio-net" {
			continue
		}
		// Queues 2i and 2i+1 are pair i's receive and send queues; the
		// control queue follows the last pair.
		for q := 0; ; q++ {
			var st VirtqueueStatus
			if err := call("x-query-virtio-queue-status", map[string]any{"path": dev.Path, "queue": q}, &st); err != nil {
				break // past the last queue
			}
			st.Path, st.Kind, st.Pair = dev.Path, "control", -1
			switch {
			case q/2 < vm.Host.Queues && q%2 == 0:
				st.Kind, st.Pair = fmt.Sprintf("rx%d", q/2), q/2
			case q/2 < vm.Host.Queues:
				st.Kind, st.Pair = fmt.Sprintf("tx%d", q/2), q/2
			}
			out = append(out, st)
		}
	}
	return out, nil
}
