(* thread_cancel.ml — C threads created and cancelled in a loop: one spinning
   (cancelled at pthread_testcancel), one blocked in read() on a pipe.
   torture-libs: *)
external cancel_round : int -> int = "torture_cancel_round"

let () =
  let ok = ref 0 in
  for i = 1 to 300 do ok := !ok + cancel_round i done;
  Printf.printf "cancelled and joined: %d\n" !ok
