(* selectwait.ml — e2e program: the main thread waits in Unix.select (a call
   that fails with EINTR when any signal with a handler arrives, SA_RESTART
   or not) and in Unix.sleepf, while a spawned domain computes. Under the
   profiler, in CPU or wall-clock mode, no wait may be cut short: the program
   counts EINTR failures and prints them. In wall mode the waiting time must
   be profiled at [waiter].
   Build: ocamlopt -I +unix unix.cmxa selectwait.ml
   Usage: selectwait.exe *)

let[@inline never] spin n =
  let acc = ref 1 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

(* 20 waits of 50 ms in select on a pipe nobody writes, then 10 sleeps of
   20 ms; returns how many select calls failed with EINTR. *)
let[@inline never] waiter () =
  let r, _w = Unix.pipe () in
  let eintr = ref 0 in
  for _ = 1 to 20 do
    match Unix.select [ r ] [] [] 0.05 with
    | _ -> ()
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> incr eintr
  done;
  for _ = 1 to 10 do Unix.sleepf 0.02 done;
  !eintr

let () =
  let d = Domain.spawn (fun () -> spin 300_000_000) in
  let eintr = waiter () in
  let s = Domain.join d in
  Printf.printf "selectwait: eintr=%d spin=%d\n" eintr s
