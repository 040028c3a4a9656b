(* sleeps.ml — tests/signal program, also run by tests/torture (agent
   preloaded, wall mode): blocking calls made by C code that does not retry
   on EINTR (usleep, sleep, pause, sigsuspend, sigtimedwait, epoll_pwait2,
   reads and accepts of a socket with SO_RCVTIMEO, also one whose timeout
   comes after a first read, or that dup2 moved onto a pipe's number;
   writes and sends on a full socket with SO_SNDTIMEO) must wait their full
   time while every thread is sampled.
   Usage: sleeps.exe CASE...   Prints "CASE: ok" or "CASE: what went wrong".
   torture-libs: *)

external run_case : string -> string = "sleeps_case"

let () =
  for i = 1 to Array.length Sys.argv - 1 do
    let c = Sys.argv.(i) in
    Printf.printf "%s: %s\n%!" c (run_case c)
  done
