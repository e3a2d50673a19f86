package endpoint

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// The client port serves gRPC and, as etcd's does, a few HTTP/1 paths
// (clientHTTP): kubeadm's preflight reads an external etcd's /version, and
// operators' scripts and load balancers probe /health. Each connection is
// told apart once, when it arrives, and then belongs to one server
// untouched, so gRPC pays nothing per request:
//
//   - in clear text by its first bytes: HTTP/2's client preface is gRPC,
//     anything else HTTP/1;
//   - over TLS by the protocol ALPN settled: h2 is gRPC (gRPC clients
//     require it), anything else HTTP/1. An HTTPS client that offers h2 too
//     (curl by default, Go's default transport) reaches gRPC, which answers
//     its request 415; `curl --http1.1` and kubeadm's client do not.
//
// The TLS handshake and the first read happen off the accept loop, bounded
// by splitTimeout, so a client that connects and says nothing holds up no
// one.

// splitTimeout bounds a new connection's TLS handshake and first bytes.
const splitTimeout = 10 * time.Second

// http2Preface is what every HTTP/2 client sends first (RFC 9113 3.4).
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// splitListener accepts from root and hands each connection to the gRPC
// or the HTTP side.
type splitListener struct {
	root   net.Listener
	tls    *tls.Config // nil: clear text
	log    *slog.Logger
	grpc   *subListener
	http   *subListener
	closed chan struct{}
	once   sync.Once
}

func newSplitListener(root net.Listener, tlsConf *tls.Config, log *slog.Logger) *splitListener {
	l := &splitListener{root: root, log: log, closed: make(chan struct{})}
	if tlsConf != nil {
		l.tls = tlsConf.Clone()
		l.tls.NextProtos = []string{"h2", "http/1.1"}
	}
	l.grpc = &subListener{parent: l, conns: make(chan net.Conn)}
	l.http = &subListener{parent: l, conns: make(chan net.Conn)}
	go l.serve()
	return l
}

func (l *splitListener) serve() {
	var delay time.Duration
	for {
		c, err := l.root.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off as
				// net/http does, rather than spin.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				l.log.Warn("client port: accept", "err", err, "retry_in", delay)
				time.Sleep(delay)
				continue
			}
			l.close(err)
			return
		}
		delay = 0
		go l.route(c)
	}
}

// route decides c's side and waits for that side to take it.
func (l *splitListener) route(c net.Conn) {
	c.SetDeadline(time.Now().Add(splitTimeout))
	isGRPC, c, err := l.classify(c)
	if err != nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	to := l.http
	if isGRPC {
		to = l.grpc
	}
	select {
	case to.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *splitListener) classify(c net.Conn) (bool, net.Conn, error) {
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if err := tc.HandshakeContext(context.Background()); err != nil {
			return false, tc, err
		}
		return tc.ConnectionState().NegotiatedProtocol == "h2", tc, nil
	}
	// Read until the bytes leave the preface or complete it.
	buf := make([]byte, 0, len(http2Preface))
	for len(buf) < len(http2Preface) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if !bytes.HasPrefix(http2Preface, buf) {
			break
		}
		if err != nil {
			return false, c, err
		}
	}
	return bytes.Equal(buf, http2Preface), &replayConn{Conn: c, head: buf}, nil
}

// close stops accepting; both sides' Accept then return err (or
// net.ErrClosed).
func (l *splitListener) close(err error) {
	l.once.Do(func() {
		if err == nil {
			err = net.ErrClosed
		}
		l.grpc.err, l.http.err = err, err
		close(l.closed)
		l.root.Close()
	})
}

// subListener is one side of a splitListener.
type subListener struct {
	parent *splitListener
	conns  chan net.Conn
	err    error // set before parent.closed is closed
}

func (s *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.parent.closed:
		return nil, s.err
	}
}

// Close stops the whole port: gRPC's GracefulStop and the HTTP server's
// Close both close their listener, and either means the port is done.
func (s *subListener) Close() error {
	s.parent.close(nil)
	return nil
}

func (s *subListener) Addr() net.Addr { return s.parent.root.Addr() }

// replayConn gives back the bytes classify read before the rest.
type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
