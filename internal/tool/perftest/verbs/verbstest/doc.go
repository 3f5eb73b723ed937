// Package verbstest is an in-memory implementation of verbs.Endpoint for
// tests: two endpoints joined back to back that execute every operation at
// once by copying bytes between registered regions and checking tokens,
// bounds and access rights as a responder would. A SEND that finds no
// receive waits for one, as an RNR retry would; a SEND can be made to lose
// its ACK (Options.LoseAck). It also provides Network, a
// Connector and Listener on numbered ports that rejects a connection to an
// unbound port with REJ reason 8, as IB CM does.
package verbstest
