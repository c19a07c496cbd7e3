package layout

// SemaphoreSuffix ends the ZooKeeper parent and the etcd queue element of
// a semaphore, which keeps semaphores in a namespace apart from locks: the
// semaphore "x" and the lock "x" never share a node or a key. No escaped
// lock name contains it, because both ZooKeeperName and EtcdName write '%'
// only before two upper-case hexadecimal digits, and 's' is not one.
const SemaphoreSuffix = "%sem"

// ZooKeeperSemaphoreParent returns the node under prefix whose children
// are the permits (holders and waiters) of the semaphore name: a sibling
// of the lock parents, so that whatever lists a prefix's lock parents
// (the orphan checks) sees the semaphores' too.
func ZooKeeperSemaphoreParent(prefix, name string) string {
	return ZooKeeperParent(prefix, name) + SemaphoreSuffix
}

// EtcdSemaphoreQueue returns the key prefix under which the etcd driver
// queues the attempts on the semaphore name:
// "<prefix>/<escaped name>%sem/". Each attempt's key is the queue followed
// by its etcd lease grant (EtcdKey), as for a lock.
func EtcdSemaphoreQueue(prefix, name string) string {
	return prefix + "/" + EtcdName(name) + SemaphoreSuffix + "/"
}
