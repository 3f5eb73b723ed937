package cm

// Timers returns how many deadlines m's heap holds: at most one per
// connection with a timer armed.
func Timers(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.timers.Len()
}
