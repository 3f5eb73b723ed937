// Package rc is ndkxdp's reliable-connection transport engine: the RoCEv2
// RC requester, responder and completer for the QPs of one queue, run by
// one goroutine over one port.Port.
//
// Work in progress; see the end of this comment for what is left.
//
// Example:
//
//	e, _ := rc.NewEngine(rc.Config{Port: p, Regions: table})
//	defer e.Close()
//	qp, _ := e.CreateQP(rc.QPConfig{QPN: 0x100, PD: 1, RecvCQ: rcq, SendCQ: scq,
//		RecvDepth: 256, SendDepth: 256, MaxRecvSGE: 4, MaxSendSGE: 4, MaxReadSGE: 4})
//	_ = qp.Connect(params)
//	st := qp.PostSend(&rc.SendWR{Op: rc.OpSend, SGL: sgl})
package rc
