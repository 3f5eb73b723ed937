// Package demo is `ndkxdp demo`: two ndkxdp hosts on an embedded veth
// pair (or, with -dev, this host against a peer: another host's `ndkxdp
// demo -serve`, rping -s or perftest's servers) exchanging SEND, WRITE
// and READ with every byte verified and a SEND ping-pong, then a report
// of rates, round-trip percentiles and the transport's recoveries. Run
// is the command, RunClient the client process of `demo -daemon`.
//
// The soak (internal/tool/soak) runs on the same hosts and connections:
// Host, OpenAdapterOn, NewHost, ListenCM, ConnectCM, CQWait and WaitOne.
package demo
