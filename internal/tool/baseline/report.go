package baseline

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

// Contender names, in report order. XDP is the reference of every ratio.
const (
	XDP = "af_xdp"
	UDP = "udp"
	TCP = "tcp"
)

// Options bound a baseline run.
type Options struct {
	// Duration of each rate window (default 1s).
	Duration time.Duration
	// Sizes are the frame sizes of the rate measurements (default 64, 1500).
	Sizes []int
	// PingSize is the frame size of the ping-pong (default 64).
	PingSize int
	// Pings is the number of timed round trips (default 20000); each
	// ping-pong also stops after 5×Duration.
	Pings int
	// Progress, if set, is told what is being measured.
	Progress func(string)
}

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = time.Second
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{64, 1500}
	}
	if o.PingSize == 0 {
		o.PingSize = 64
	}
	if o.Pings == 0 {
		o.Pings = 20000
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

// Report holds one run's figures, keyed by contender.
type Report struct {
	Options Options
	Rates   map[string]map[int]Rate // contender -> frame size -> rate
	RTT     map[string]Latency      // contender -> ping-pong
}

// Run measures every contender on the pair, one after the other. When ctx
// ends, the measurement under way stops early and Run returns ctx's error.
func Run(ctx context.Context, p *vethpair.Pair, o Options) (*Report, error) {
	o.defaults()
	r := &Report{Options: o, Rates: map[string]map[int]Rate{}, RTT: map[string]Latency{}}
	rate := map[string]func(context.Context, *vethpair.Pair, int, time.Duration) (Rate, error){XDP: xdpRate, UDP: udpRate, TCP: tcpRate}
	ping := map[string]func(context.Context, *vethpair.Pair, int, int, time.Duration) (Latency, error){XDP: xdpPingPong, UDP: udpPingPong, TCP: tcpPingPong}
	for _, c := range []string{XDP, UDP, TCP} {
		r.Rates[c] = map[int]Rate{}
		for _, size := range o.Sizes {
			o.Progress(fmt.Sprintf("%s rate, %d-byte frames, %v", c, size, o.Duration))
			m, err := rate[c](ctx, p, size, o.Duration)
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			if err != nil {
				return r, fmt.Errorf("%s rate at %d bytes: %w", c, size, err)
			}
			r.Rates[c][size] = m
		}
		o.Progress(fmt.Sprintf("%s ping-pong, %d-byte frames, up to %d round trips", c, o.PingSize, o.Pings))
		// Round trips are counted, not timed, so their bound is generous:
		// both raw AF_XDP ends busy-poll, which on a loaded machine can
		// take a millisecond a round trip.
		l, err := ping[c](ctx, p, o.PingSize, o.Pings, max(5*o.Duration, 3*time.Second))
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if err != nil {
			return r, fmt.Errorf("%s ping-pong: %w", c, err)
		}
		r.RTT[c] = l
	}
	return r, nil
}

// Table prints absolute figures and each contender's ratio to raw AF_XDP.
func (r *Report) Table() string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "measure\t")
	for _, c := range []string{XDP, UDP, TCP} {
		fmt.Fprintf(w, "%s\t", c)
	}
	fmt.Fprintf(w, "%s/%s\t%s/%s\t\n", UDP, XDP, TCP, XDP)
	for _, size := range r.Options.Sizes {
		fmt.Fprintf(w, "rate %dB (Mpps)\t", size)
		for _, c := range []string{XDP, UDP, TCP} {
			fmt.Fprintf(w, "%.3f\t", r.Rates[c][size].PerSecond()/1e6)
		}
		ref := r.Rates[XDP][size].PerSecond()
		fmt.Fprintf(w, "%s\t%s\t\n", ratio(r.Rates[UDP][size].PerSecond(), ref), ratio(r.Rates[TCP][size].PerSecond(), ref))
		fmt.Fprintf(w, "rate %dB (Gbit/s)\t", size)
		for _, c := range []string{XDP, UDP, TCP} {
			fmt.Fprintf(w, "%.2f\t", r.Rates[c][size].Gbps())
		}
		fmt.Fprintf(w, "\t\t\n")
	}
	for _, q := range []struct {
		name string
		get  func(Latency) time.Duration
	}{{"p50", func(l Latency) time.Duration { return l.P50 }}, {"p99", func(l Latency) time.Duration { return l.P99 }}} {
		fmt.Fprintf(w, "rtt %dB %s (us)\t", r.Options.PingSize, q.name)
		for _, c := range []string{XDP, UDP, TCP} {
			fmt.Fprintf(w, "%.1f\t", us(q.get(r.RTT[c])))
		}
		ref := us(q.get(r.RTT[XDP]))
		fmt.Fprintf(w, "%s\t%s\t\n", ratio(us(q.get(r.RTT[UDP])), ref), ratio(us(q.get(r.RTT[TCP])), ref))
	}
	w.Flush()
	return sb.String()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ratio(x, ref float64) string {
	if ref == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x/ref)
}
