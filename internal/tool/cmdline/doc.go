// Package cmdline is what ndkxdp's commands share about their command
// line and the system they run on, so that the tools in rooms of their
// own (internal/tool/demo, internal/tool/soak) behave as the commands in
// cmd/ndkxdp do:
//
//   - a bad command line is a UsageError (exit status 2), built with
//     Usagef; NewFlagSet and ParseFlags print -h on stdout and refuse
//     stray arguments;
//   - EnterPhase records what a command is doing, for the message a
//     signal leaves ("interrupted during SEND");
//   - RequireCaps names each missing capability before anything touches
//     the system;
//   - NICFlags (-queues, -xdp-mode, -zero-copy, -busy-poll) and
//     OpenDevice give a tool its adapter: attached to -dev in process, or
//     a client of the daemon at -daemon;
//   - Progress draws a long run's progress line on a terminal.
//
// It is not the commands: dispatch, help and exit statuses are
// cmd/ndkxdp's.
package cmdline
