(* ioloop.ml — tests/signal program: an I/O loop written the way OCaml
   tools and servers write one, all through calls the agent interposes:
   - Ioloop.drain: Unix.read of an empty non-blocking pipe, EAGAIN raised
     as Unix_error and caught (an event loop's read until it would block);
   - Ioloop.lines: a small file read with input_line to End_of_file,
     opened and closed each round (a new descriptor each time);
   - Ioloop.ping: one byte written to a socketpair and taken with Unix.recv;
   - Ioloop.tick: Unix.select on nothing with a zero timeout (a loop that
     polls between its work).
   Before, each of these calls cost two more system calls under the agent,
   and the time of every call was profiled at pthread_sigmask. A select
   cut short by a signal raises EINTR: counted, it must stay 0.
   Usage: ioloop.exe SECONDS. Prints "ioloop: N rounds (SUM), eintr=E". *)

let[@inline never] drain fd buf =
  let n = ref 0 in
  for _ = 1 to 200 do
    match Unix.read fd buf 0 (Bytes.length buf) with
    | k -> n := !n + k
    | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) -> incr n
  done;
  !n

let[@inline never] lines path =
  let ic = open_in path in
  let rec go n = match input_line ic with _ -> go (n + 1) | exception End_of_file -> n in
  let n = go 0 in
  close_in ic;
  n

let[@inline never] ping a b buf =
  let n = ref 0 in
  for _ = 1 to 100 do
    ignore (Unix.write_substring a "x" 0 1);
    n := !n + Unix.recv b buf 0 1 []
  done;
  !n

(* Unix.select raises EINTR if a signal cuts it short: counted. *)
let eintr = ref 0

let[@inline never] tick () =
  let n = ref 0 in
  for _ = 1 to 100 do
    match Unix.select [] [] [] 0.0 with
    | [], [], [] -> incr n
    | _ -> ()
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> incr eintr
  done;
  !n

let () =
  let secs = try float_of_string Sys.argv.(1) with _ -> 1.0 in
  let r, _w = Unix.pipe ~cloexec:true () in
  Unix.set_nonblock r;
  let a, b = Unix.socketpair ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  let path = Filename.temp_file "ioloop" ".txt" in
  let oc = open_out path in
  for i = 1 to 200 do Printf.fprintf oc "line %d of the file\n" i done;
  close_out oc;
  let buf = Bytes.create 64 in
  let t0 = Unix.gettimeofday () and rounds = ref 0 and sum = ref 0 in
  while Unix.gettimeofday () -. t0 < secs do
    sum := !sum + drain r buf + lines path + ping a b buf + tick ();
    incr rounds
  done;
  Sys.remove path;
  Printf.printf "ioloop: %d rounds (%d), eintr=%d\n" !rounds !sum !eintr
