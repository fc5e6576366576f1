package cluster

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Faults for the tests that check what configstamp does when the control plane
// misbehaves: a process of the control plane restarted, paused or signalled.

// process finds the running process of that name (etcd, kube-apiserver, ...).
func (c *Cluster) process(name string) (*proc, error) {
	for _, p := range c.procs {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no %s in this cluster", name)
}

// Signal sends sig to the named process of the control plane.
func (c *Cluster) Signal(name string, sig syscall.Signal) error {
	p, err := c.process(name)
	if err != nil {
		return err
	}
	return p.cmd.Process.Signal(sig)
}

// Pause stops the named process (SIGSTOP): it keeps its sockets open but answers
// nothing, as a process stalled by its machine would.
func (c *Cluster) Pause(name string) error { return c.Signal(name, syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (c *Cluster) Resume(name string) error { return c.Signal(name, syscall.SIGCONT) }

// StopAPIServer stops kube-apiserver (SIGTERM, its graceful shutdown) and waits until
// the process is gone, so its port is free again. StartAPIServer brings it back.
func (c *Cluster) StopAPIServer() error {
	p, err := c.process("kube-apiserver")
	if err != nil {
		return err
	}
	// It stops listening within a second, then can linger for half a minute (its
	// audit backend, its etcd clients): what the clients see is over by then.
	Terminate(p.cmd.Process, p.done, 5*time.Second)
	c.opts.Log("stopped kube-apiserver (pid %d)", p.cmd.Process.Pid)
	return nil
}

// StartAPIServer starts kube-apiserver again with the same flags (same port, same
// etcd, same certificates) and waits until it is ready. A process that exits early (its
// port still taken for a moment after the last one) is started again, up to five times.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	for i, p := range c.procs {
		if p.name != "kube-apiserver" {
			continue
		}
		select {
		case <-p.done:
		default:
			return fmt.Errorf("kube-apiserver (pid %d) still runs", p.cmd.Process.Pid)
		}
		var err error
		for attempt := 1; ; attempt++ {
			var np *proc
			if np, err = c.start(p.name, p.args); err != nil {
				return err
			}
			c.procs[i] = np
			if err = c.waitReady(ctx, 2*time.Minute); err == nil {
				return nil
			}
			select {
			case <-np.done:
			default:
				return err // still running, not ready: no second process on its port
			}
			if attempt == 5 || ctx.Err() != nil {
				return fmt.Errorf("kube-apiserver exited early %d times: %w", attempt, err)
			}
			c.opts.Log("kube-apiserver exited early (attempt %d), starting it again", attempt)
			time.Sleep(time.Second)
		}
	}
	return fmt.Errorf("no kube-apiserver in this cluster")
}

// APIServerRunning reports whether the kube-apiserver process runs (ready or not).
func (c *Cluster) APIServerRunning() bool {
	p, err := c.process("kube-apiserver")
	if err != nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port, waiting
// until it is ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer(ctx)
}

// PKI returns the API server's CA and its serving certificate and key (valid for
// 127.0.0.1 and localhost), for a test server that stands in front of it.
func (c *Cluster) PKI() (ca, cert, key string) {
	files := pkiPaths(c.Dir)
	return files.ca, files.cert, files.key
}
