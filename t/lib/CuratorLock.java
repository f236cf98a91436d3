/*
 * A Curator 5.4 participant for the interop tests: takes one lock, says so
 * on stdout, holds it, releases it.
 *
 *   java CuratorLock <hosts> <kind> <path> <hold ms> [leases] [wait ms]
 *
 * kind: mutex (InterProcessMutex), semaphore (InterProcessSemaphore, v1),
 * semv2 (InterProcessSemaphoreV2), semmutex (InterProcessSemaphoreMutex),
 * read, write (InterProcessReadWriteLock); revoke: Curator's
 * Revoker.attemptRevoke() on the node <path> (prints "REVOKE SENT").
 *
 * Prints "READY", then "ACQUIRED <epoch ms>" and "RELEASED <epoch ms>", or
 * "TIMEOUT" when the lock did not come within <wait ms> (default 60 s).
 */

import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphore;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.RetryOneTime;


@SuppressWarnings("deprecation")
public class CuratorLock {

    public static void main(String[] args) throws Exception {
        String hosts = args[0], kind = args[1], path = args[2];
        long hold = Long.parseLong(args[3]);
        int leases = args.length > 4 ? Integer.parseInt(args[4]) : 1;
        long wait = args.length > 5 ? Long.parseLong(args[5]) : 60000;

        CuratorFramework client = CuratorFrameworkFactory.newClient(hosts,
            10000, 5000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();

        System.out.println("READY");
        System.out.flush();

        if (kind.equals("revoke")) {
            Revoker.attemptRevoke(client, path);
            System.out.println("REVOKE SENT");
            System.out.flush();
            client.close();
            return;
        }

        boolean got;
        Lease lease = null;
        InterProcessLock lock = null;
        InterProcessSemaphore v1 = null;
        InterProcessSemaphoreV2 v2 = null;

        switch (kind) {
        case "semaphore":
            v1 = new InterProcessSemaphore(client, path, leases);
            lease = v1.acquire(wait, TimeUnit.MILLISECONDS);
            got = lease != null;
            break;
        case "semv2":
            v2 = new InterProcessSemaphoreV2(client, path, leases);
            lease = v2.acquire(wait, TimeUnit.MILLISECONDS);
            got = lease != null;
            break;
        default:
            lock = kind.equals("mutex") ? new InterProcessMutex(client, path)
                : kind.equals("semmutex")
                    ? new InterProcessSemaphoreMutex(client, path)
                : kind.equals("read")
                    ? new InterProcessReadWriteLock(client, path).readLock()
                : kind.equals("write")
                    ? new InterProcessReadWriteLock(client, path).writeLock()
                : null;
            if (lock == null) {
                throw new IllegalArgumentException("unknown kind " + kind);
            }
            got = lock.acquire(wait, TimeUnit.MILLISECONDS);
        }

        if (!got) {
            System.out.println("TIMEOUT");
            client.close();
            return;
        }

        System.out.println("ACQUIRED " + System.currentTimeMillis());
        System.out.flush();

        Thread.sleep(hold);

        if (lease != null) {
            lease.close();
        } else {
            lock.release();
        }

        System.out.println("RELEASED " + System.currentTimeMillis());
        System.out.flush();

        client.close();
    }
}
