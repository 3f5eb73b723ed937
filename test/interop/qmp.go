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

// VirtioQueues reports qemu's side of the guest's virtio-net queues, one
// line per queue (x-query-virtio-queue-status): how far the device has
// taken descriptors (last-avail-idx) and returned them (used-idx), and
// what the guest has made available (shadow-avail-idx). A queue whose
// guest keeps posting and kicking while qemu's indices stand still is
// stalled in the device, not in the guest; the guest's own counters
// (ethtool -S) tell the other half.
func (vm *VM) VirtioQueues(ctx context.Context) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(vm.dir, qmpSocket))
	if err != nil {
		return "", fmt.Errorf("interop: qmp: %w", err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // the greeting
		return "", fmt.Errorf("interop: qmp greeting: %w", err)
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
		return "", err
	}
	var devs []struct{ Path, Name string }
	if err := call("x-query-virtio", map[string]any{}, &devs); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, dev := range devs {
		if dev.Name != "virtio-net" {
			continue
		}
		// Queues 2i and 2i+1 are pair i's receive and send queues; the
		// control queue follows the last pair.
		for q := 0; ; q++ {
			var st struct {
				Index        int `json:"queue-index"`
				Inuse        int
				LastAvail    int `json:"last-avail-idx"`
				ShadowAvail  int `json:"shadow-avail-idx"`
				UsedIdx      int `json:"used-idx"`
				SignalledUse int `json:"signalled-used"`
			}
			if err := call("x-query-virtio-queue-status", map[string]any{"path": dev.Path, "queue": q}, &st); err != nil {
				break // past the last queue
			}
			kind := "control"
			switch {
			case q/2 < vm.Host.Queues && q%2 == 0:
				kind = fmt.Sprintf("rx%d", q/2)
			case q/2 < vm.Host.Queues:
				kind = fmt.Sprintf("tx%d", q/2)
			}
			fmt.Fprintf(&b, "%s %s: last-avail-idx %d shadow-avail-idx %d used-idx %d signalled-used %d inuse %d\n",
				dev.Path, kind, st.LastAvail, st.ShadowAvail, st.UsedIdx, st.SignalledUse, st.Inuse)
		}
	}
	return b.String(), nil
}
