(* domains200.ml — 200 domains created and joined (10 at a time) while
   another domain allocates lists the whole time. *)
let[@inline never] spin n =
  let acc = ref 0 in
  for i = 1 to n do acc := (!acc + i * i) land 0xffff done;
  !acc

let () =
  let stop = Atomic.make false in
  let alloc = Domain.spawn (fun () ->
    let n = ref 0 in
    while not (Atomic.get stop) do
      n := !n + List.length (List.init 1000 (fun i -> string_of_int i))
    done;
    !n > 0) in
  let total = ref 0 in
  for _ = 1 to 20 do
    let ds = List.init 10 (fun i -> Domain.spawn (fun () -> spin (100_000 + i))) in
    List.iter (fun d -> total := (!total + Domain.join d) land 0xffffff) ds
  done;
  Atomic.set stop true;
  Printf.printf "joined 200 domains: %d, allocator ran: %b\n" !total (Domain.join alloc)
