/*
 * A Curator 5.4 participant for the interop tests: takes one lock, says so
 * on stdout, holds it, releases it.
 *
 *   java CuratorLock <hosts> <kind> <path> <hold ms> [leases] [wait ms]
 *       [url]
 *
 * kind: mutex (InterProcessMutex), semaphore (InterProcessSemaphore, v1),
 * semv2 (InterProcessSemaphoreV2), semmutex (InterProcessSemaphoreMutex),
 * read, write (InterProcessReadWriteLock); revoke: Curator's
 * Revoker.attemptRevoke() on the node <path> (prints "REVOKE SENT").
 *
 * semaphore:<qty>, semv2:<qty>: acquire(qty), several leases at once.
 *
 * Prints "READY", then "ACQUIRED <epoch ms>" and "RELEASED <epoch ms>", or
 * "TIMEOUT" when the lock did not come within <wait ms> (default 60 s).
 * With a url, it holds for as long as a GET of it takes instead of
 * <hold ms> (the backend counts what it holds).
 */

import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.util.Collection;
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
        String url = args.length > 6 ? args[6] : null;
        int qty = 1;

        if (kind.matches("(semaphore|semv2):\\d+")) {
            qty = Integer.parseInt(kind.substring(kind.indexOf(':') + 1));
            kind = kind.substring(0, kind.indexOf(':'));
        }

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
        Collection<Lease> many = null;
        InterProcessLock lock = null;
        InterProcessSemaphore v1 = null;
        InterProcessSemaphoreV2 v2 = null;

        switch (kind) {
        case "semaphore":
            v1 = new InterProcessSemaphore(client, path, leases);
            if (qty > 1) {
                many = v1.acquire(qty, wait, TimeUnit.MILLISECONDS);
                got = many != null;
            } else {
                lease = v1.acquire(wait, TimeUnit.MILLISECONDS);
                got = lease != null;
            }
            break;
        case "semv2":
            v2 = new InterProcessSemaphoreV2(client, path, leases);
            if (qty > 1) {
                many = v2.acquire(qty, wait, TimeUnit.MILLISECONDS);
                got = many != null;
            } else {
                lease = v2.acquire(wait, TimeUnit.MILLISECONDS);
                got = lease != null;
            }
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

        if (url != null) {
            HttpURLConnection c =
                (HttpURLConnection) new URL(url).openConnection();
            try (InputStream in = c.getInputStream()) {
                in.readAllBytes();
            }
        } else {
            Thread.sleep(hold);
        }

        if (many != null) {
            if (v1 != null) {
                v1.returnAll(many);
            } else {
                v2.returnAll(many);
            }
        } else if (lease != null) {
            lease.close();
        } else {
            lock.release();
        }

        System.out.println("RELEASED " + System.currentTimeMillis());
        System.out.flush();

        client.close();
    }
}
