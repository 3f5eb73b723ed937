package rc

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestLocalOps_InOrderOverFaultyLink: rounds of FastRegister, a
// two-packet SEND from the new registration, a READ into it and an
// Invalidate, pipelined 20 rounds deep over a link that loses, duplicates
// and reorders frames. Go-back-N resends the SENDs and READs around the
// local operations, which execute once: every completion arrives exactly
// once, in posting order, successful, and every message arrives intact.
func TestLocalOps_InOrderOverFaultyLink(t *testing.T) {
	for _, seed := range []int64{11, 12, 13} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			pc := porttest.PipeConfig{Seed: seed, Loss: 0.05, Duplicate: 0.05, Reorder: 0.05}
			a, b := newPair(t, pairOptions{pipe: pc, mtu: rocev2.MTU1024, params: func(p *ConnParams) {
				p.AckTimeout = timeScale * 30 * time.Millisecond
			}})
			qa, qb := a.qps[0], b.qps[0]
			const rounds, batch, msg = 60, 20, 2000
			fast, err := a.regions.AllocFastMR(testPD, 1<<20, true)
			if err != nil {
				t.Fatal(err)
			}
			remote := b.buffer(msg, memreg.AccessRemoteRead, false)
			fill(remote.b, uint64(seed))
			recv := b.buffer(rounds*msg, memreg.AccessLocalWrite, false)
			for i := range rounds {
				mustPost(t, qb.PostReceive(i, []SGE{recv.sge(i*msg, msg)}))
			}
			mem := make([]byte, rounds*2*msg)
			local := fast.Local
			for start := 0; start < rounds; start += batch {
				for r := start; r < start+batch; r++ {
					buf := mem[r*2*msg : (r+1)*2*msg]
					fill(buf[:msg], uint64(r))
					fr := SendWR{Op: OpFastRegister, Context: r, MR: local, RemoteAddr: addrOf(buf), Buf: buf,
						Access: memreg.AccessLocalWrite}
					mustPost(t, qa.PostSend(&fr))
					local = fr.Tokens.Local
					mustPost(t, qa.PostSend(&SendWR{Op: OpSend, Context: r, SGL: []SGE{{Addr: addrOf(buf), Length: msg, Token: local}}}))
					mustPost(t, qa.PostSend(&SendWR{Op: OpRead, Context: r, SGL: []SGE{{Addr: addrOf(buf) + msg, Length: msg, Token: local}},
						RemoteAddr: remote.addr(0), RemoteToken: remote.tokens.Remote}))
					mustPost(t, qa.PostSend(&SendWR{Op: OpInvalidate, Context: r, InvalidateToken: local}))
				}
				es := waitCQ(t, a.scq, 4*batch, timeScale*20*time.Second)
				for k, e := range es {
					r := start + k/4
					typ := []ndkpi.OperationType{ndkpi.OpFastRegister, ndkpi.OpSend, ndkpi.OpRead, ndkpi.OpInvalidate}[k%4]
					checkEntry(t, e, ndkpi.StatusSuccess, typ, r)
				}
			}
			for i, e := range waitCQ(t, b.rcq, rounds, timeScale*20*time.Second) {
				checkEntry(t, e, ndkpi.StatusSuccess, ndkpi.OpReceive, i)
				if !bytes.Equal(recv.b[i*msg:(i+1)*msg], mem[i*2*msg:i*2*msg+msg]) {
					t.Fatalf("message %d differs", i)
				}
				if !bytes.Equal(mem[i*2*msg+msg:(i+1)*2*msg], remote.b) {
					t.Fatalf("READ %d placed other bytes", i)
				}
			}
			expectNone(t, a.scq, 10*time.Millisecond)
			if st := a.eng.Stats(); st.Retransmits == 0 && a.pipe.Stats(porttest.AtoB).Dropped > 0 {
				t.Errorf("frames lost but nothing retransmitted: %+v", st)
			}
		})
	}
}
